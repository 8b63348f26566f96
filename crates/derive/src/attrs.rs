//! `#[resource(...)]`: what the user wrote, checked while it is parsed.
//!
//! Every check that can be made at compile time is made here, so a mistake the API server
//! would refuse when the CustomResourceDefinition is created (a group without a dot, a plural
//! with capitals, a printer column of an unknown type) is a compile error pointing at the
//! attribute instead.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned;
use syn::{Attribute, Ident, LitBool, LitInt, LitStr, Path, Type};

/// The keys `#[resource(...)]` accepts, for the message about an unknown one.
const KEYS: &str = "group, version, kind, struct_name, namespaced, status, plural, singular, shortname, \
                    category, printcolumn, scale, selectable_field, derive, storage, served, \
                    deprecated, deprecation_warning, annotation, label, crate";

/// The types the API server accepts for an additional printer column.
const COLUMN_TYPES: &[&str] = &["integer", "number", "string", "boolean", "date"];

/// Derives the generated type always has, or that would clash with generated impls.
const GENERATED_TRAITS: &[(&str, &str)] = &[
    ("Clone", "is always derived"),
    ("Debug", "is always derived"),
    ("Serialize", "is generated (it writes apiVersion and kind)"),
    (
        "Deserialize",
        "is generated (it checks apiVersion and kind)",
    ),
];

/// An additional printer column (`kubectl get` output).
#[derive(Debug)]
pub(crate) struct PrinterColumn {
    pub(crate) name: String,
    pub(crate) type_: String,
    pub(crate) json_path: String,
    pub(crate) description: Option<String>,
    pub(crate) format: Option<String>,
    pub(crate) priority: i32,
}

/// The scale subresource's paths.
#[derive(Debug)]
pub(crate) struct Scale {
    pub(crate) spec_replicas_path: String,
    pub(crate) status_replicas_path: String,
    pub(crate) label_selector_path: Option<String>,
}

/// Everything `#[resource(...)]` says, checked.
pub(crate) struct Options {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
    /// The generated struct's name: the kind, or `struct_name`.
    pub(crate) struct_ident: Ident,
    pub(crate) namespaced: bool,
    pub(crate) status: Option<Type>,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) shortnames: Vec<String>,
    pub(crate) categories: Vec<String>,
    pub(crate) printcolumns: Vec<PrinterColumn>,
    pub(crate) scale: Option<Scale>,
    pub(crate) selectable_fields: Vec<String>,
    pub(crate) derives: Vec<Path>,
    pub(crate) storage: bool,
    pub(crate) served: bool,
    pub(crate) deprecated: bool,
    pub(crate) deprecation_warning: Option<String>,
    pub(crate) annotations: Vec<(String, String)>,
    pub(crate) labels: Vec<(String, String)>,
    /// The path of kctrl-client in the user's crate.
    pub(crate) krate: Path,
}

/// What has been read so far; `Option`s become defaults or errors in [`Raw::finish`].
#[derive(Default)]
struct Raw {
    group: Option<LitStr>,
    version: Option<LitStr>,
    kind: Option<LitStr>,
    struct_name: Option<LitStr>,
    namespaced: Option<Span>,
    status: Option<Type>,
    plural: Option<LitStr>,
    singular: Option<LitStr>,
    shortnames: Vec<String>,
    categories: Vec<String>,
    printcolumns: Vec<PrinterColumn>,
    scale: Option<Scale>,
    selectable_fields: Vec<String>,
    derives: Vec<Path>,
    storage: Option<Span>,
    served: Option<bool>,
    deprecated: Option<Span>,
    deprecation_warning: Option<LitStr>,
    annotations: Vec<(String, String)>,
    labels: Vec<(String, String)>,
    krate: Option<Path>,
}

/// Reads every `#[resource(...)]` of the input (several are merged), then checks the whole.
pub(crate) fn parse(attrs: &[Attribute], input_ident: &Ident) -> syn::Result<Options> {
    let mut raw = Raw::default();
    let mut seen = false;
    for attr in attrs.iter().filter(|a| a.path().is_ident("resource")) {
        seen = true;
        attr.parse_nested_meta(|meta| raw.entry(&meta))?;
    }
    if !seen {
        return Err(syn::Error::new(
            input_ident.span(),
            "#[derive(CustomResource)] needs a #[resource(...)] attribute naming the resource, \
             e.g. #[resource(group = \"example.com\", version = \"v1\", kind = \"Foo\", namespaced)]",
        ));
    }
    raw.finish(input_ident)
}

/// Sets a key that may appear once.
fn once<T>(slot: &mut Option<T>, meta: &ParseNestedMeta<'_>, value: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(meta.error(format!(
            "`{}` is given twice in #[resource(...)]; keep one",
            key(meta)
        )));
    }
    *slot = Some(value);
    Ok(())
}

fn key(meta: &ParseNestedMeta<'_>) -> String {
    meta.path
        .get_ident()
        .map_or_else(|| "?".to_owned(), Ident::to_string)
}

/// The string after `key = `.
fn string(meta: &ParseNestedMeta<'_>) -> syn::Result<LitStr> {
    let k = key(meta);
    let value = meta.value().map_err(|_| {
        meta.error(format!(
            "`{k}` takes a string: write `{k} = \"...\"` in #[resource(...)]"
        ))
    })?;
    value.parse::<LitStr>().map_err(|e| {
        syn::Error::new(
            e.span(),
            format!("`{k}` takes a string literal: write `{k} = \"...\"`"),
        )
    })
}

/// A flag: `key` alone, or `key = true|false`.
fn flag(meta: &ParseNestedMeta<'_>) -> syn::Result<bool> {
    if meta.input.peek(syn::Token![=]) {
        let lit: LitBool = meta.value()?.parse().map_err(|e| {
            syn::Error::new(
                e.span(),
                format!("`{}` is a flag: write `{0}` or `{0} = false`", key(meta)),
            )
        })?;
        Ok(lit.value)
    } else {
        Ok(true)
    }
}

/// A key-value pair: `annotation("key", "value")`.
fn pair(meta: &ParseNestedMeta<'_>) -> syn::Result<(String, String)> {
    let k = key(meta);
    let usage = format!("write `{k}(\"key\", \"value\")`");
    let content;
    if !meta.input.peek(syn::token::Paren) {
        return Err(meta.error(format!("`{k}` takes a key and a value: {usage}")));
    }
    syn::parenthesized!(content in meta.input);
    let name: LitStr = content
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("{k}: {usage}")))?;
    content
        .parse::<syn::Token![,]>()
        .map_err(|e| syn::Error::new(e.span(), format!("{k}: {usage}")))?;
    let value: LitStr = content
        .parse()
        .map_err(|e| syn::Error::new(e.span(), format!("{k}: {usage}")))?;
    let _ = content.parse::<Option<syn::Token![,]>>()?;
    if !content.is_empty() {
        return Err(content.error(format!("{k}: {usage}")));
    }
    if name.value().is_empty() {
        return Err(syn::Error::new(
            name.span(),
            format!("{k}: the key must not be empty"),
        ));
    }
    Ok((name.value(), value.value()))
}

impl Raw {
    fn entry(&mut self, meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
        let Some(ident) = meta.path.get_ident() else {
            return Err(meta.error(format!(
                "unknown key in #[resource(...)]; the keys are: {KEYS}"
            )));
        };
        match ident.to_string().as_str() {
            "group" => {
                let v = string(meta)?;
                check_group(&v)?;
                once(&mut self.group, meta, v)
            }
            "version" => {
                let v = string(meta)?;
                check_dns_label(&v, "version", "e.g. `v1`, `v1alpha1`, `v2beta3`")?;
                once(&mut self.version, meta, v)
            }
            "kind" => {
                let v = string(meta)?;
                once(&mut self.kind, meta, v)
            }
            "struct_name" => {
                let v = string(meta)?;
                once(&mut self.struct_name, meta, v)
            }
            "namespaced" => {
                if flag(meta)? {
                    once(&mut self.namespaced, meta, ident.span())
                } else {
                    Ok(())
                }
            }
            "status" => {
                let v = string(meta)?;
                let ty: Type = v.parse().map_err(|_| {
                    syn::Error::new(
                        v.span(),
                        "`status` names the status type: write `status = \"FooStatus\"` (a type in scope)",
                    )
                })?;
                once(&mut self.status, meta, ty)
            }
            "plural" => {
                let v = string(meta)?;
                check_dns_label(&v, "plural", "all lowercase, e.g. `foos`")?;
                once(&mut self.plural, meta, v)
            }
            "singular" => {
                let v = string(meta)?;
                check_dns_label(&v, "singular", "all lowercase, e.g. `foo`")?;
                once(&mut self.singular, meta, v)
            }
            "shortname" => {
                let v = string(meta)?;
                check_dns_label(&v, "shortname", "all lowercase, e.g. `fo`")?;
                self.shortnames.push(v.value());
                Ok(())
            }
            "category" => {
                let v = string(meta)?;
                check_dns_label(&v, "category", "all lowercase, e.g. `all`")?;
                self.categories.push(v.value());
                Ok(())
            }
            "printcolumn" => {
                let column = printcolumn(meta)?;
                self.printcolumns.push(column);
                Ok(())
            }
            "scale" => {
                let s = scale(meta)?;
                once(&mut self.scale, meta, s)
            }
            "selectable_field" => {
                let v = string(meta)?;
                check_json_path(&v, "selectable_field", "e.g. `.spec.color`")?;
                self.selectable_fields.push(v.value());
                Ok(())
            }
            "derive" => {
                let v = string(meta)?;
                let path: Path = v.parse().map_err(|_| {
                    syn::Error::new(
                        v.span(),
                        "`derive` names one trait to derive: write `derive = \"PartialEq\"`",
                    )
                })?;
                if let Some(last) = path.segments.last() {
                    let name = last.ident.to_string();
                    if let Some((_, why)) = GENERATED_TRAITS.iter().find(|(t, _)| *t == name) {
                        return Err(syn::Error::new(
                            v.span(),
                            format!(
                                "`{name}` {why} for the generated type: remove `derive = \"{name}\"`"
                            ),
                        ));
                    }
                }
                self.derives.push(path);
                Ok(())
            }
            "storage" => {
                if flag(meta)? {
                    once(&mut self.storage, meta, ident.span())
                } else {
                    Ok(())
                }
            }
            "served" => {
                let v = flag(meta)?;
                once(&mut self.served, meta, v)
            }
            "deprecated" => {
                if flag(meta)? {
                    once(&mut self.deprecated, meta, ident.span())
                } else {
                    Ok(())
                }
            }
            "deprecation_warning" => {
                let v = string(meta)?;
                once(&mut self.deprecation_warning, meta, v)
            }
            "annotation" => {
                let p = pair(meta)?;
                self.annotations.push(p);
                Ok(())
            }
            "label" => {
                let p = pair(meta)?;
                self.labels.push(p);
                Ok(())
            }
            "crate" => {
                let v = string(meta)?;
                let path: Path = v.parse().map_err(|_| {
                    syn::Error::new(
                        v.span(),
                        "`crate` is the path of kctrl-client: write `crate = \"::kctrl_client\"`",
                    )
                })?;
                once(&mut self.krate, meta, path)
            }
            _ => Err(meta.error(format!(
                "unknown key `{ident}` in #[resource(...)]; the keys are: {KEYS}"
            ))),
        }
    }

    fn finish(self, input_ident: &Ident) -> syn::Result<Options> {
        let missing = |what: &str, example: &str| {
            syn::Error::new(
                input_ident.span(),
                format!("#[resource(...)] is missing `{what}`: add `{what} = \"{example}\"`"),
            )
        };
        let group = self.group.ok_or_else(|| missing("group", "example.com"))?;
        let version = self.version.ok_or_else(|| missing("version", "v1"))?;
        let kind_lit = self.kind.ok_or_else(|| missing("kind", "Foo"))?;
        let kind = kind_lit.value();
        if !kind.starts_with(|c: char| c.is_ascii_uppercase())
            || !kind.chars().all(|c| c.is_ascii_alphanumeric())
        {
            return Err(syn::Error::new(
                kind_lit.span(),
                format!(
                    "kind {kind:?} is not CamelCase: a kind is letters and digits starting with an \
                     uppercase letter (as `kubectl` and the API server expect), e.g. `{}`",
                    capitalize(&kind.replace(|c: char| !c.is_ascii_alphanumeric(), ""))
                ),
            ));
        }
        let (name_lit, what) = match &self.struct_name {
            Some(n) => (n, "struct_name"),
            None => (&kind_lit, "kind"),
        };
        let name = name_lit.value();
        let struct_ident: Ident = syn::parse_str(&name).map_err(|_| {
            syn::Error::new(
                name_lit.span(),
                format!("{what} {name:?} is not a Rust identifier, and the generated type is named after it"),
            )
        })?;
        if struct_ident == *input_ident {
            return Err(syn::Error::new(
                name_lit.span(),
                format!(
                    "{what} {name:?} is also the name of this struct, and #[derive(CustomResource)] generates \
                     a type `{name}` holding metadata, spec and status: rename the struct (e.g. `{name}Spec`)"
                ),
            ));
        }
        let plural = match self.plural {
            Some(p) => p.value(),
            None => default_plural(&kind),
        };
        let singular = match self.singular {
            Some(s) => s.value(),
            None => kind.to_lowercase(),
        };
        if plural == singular {
            return Err(syn::Error::new(
                input_ident.span(),
                format!(
                    "the plural and the singular name are both {plural:?}; the API server needs them \
                     different: set `plural = \"...\"`"
                ),
            ));
        }
        if let Some(scale) = &self.scale
            && self.status.is_none()
            && scale.status_replicas_path.starts_with(".status")
        {
            // Allowed by the API server, but the path then reads a field the type does not
            // have: say so rather than let `kubectl scale` report nothing.
            return Err(syn::Error::new(
                input_ident.span(),
                "`scale(status_replicas_path = \".status...\")` reads the status, but there is no \
                 `status = \"...\"` type: add one",
            ));
        }
        if self.deprecation_warning.is_some() && self.deprecated.is_none() {
            return Err(syn::Error::new(
                self.deprecation_warning
                    .as_ref()
                    .map_or_else(Span::call_site, LitStr::span),
                "`deprecation_warning` only applies to a deprecated version: add `deprecated`",
            ));
        }
        Ok(Options {
            group: group.value(),
            version: version.value(),
            kind,
            struct_ident,
            namespaced: self.namespaced.is_some(),
            status: self.status,
            plural,
            singular,
            shortnames: self.shortnames,
            categories: self.categories,
            printcolumns: self.printcolumns,
            scale: self.scale,
            selectable_fields: self.selectable_fields,
            derives: self.derives,
            storage: self.storage.is_some(),
            served: self.served.unwrap_or(true),
            deprecated: self.deprecated.is_some(),
            deprecation_warning: self.deprecation_warning.map(|l| l.value()),
            annotations: self.annotations,
            labels: self.labels,
            krate: self
                .krate
                .unwrap_or_else(|| syn::parse_quote!(::kctrl_client)),
        })
    }
}

/// The plural the API server users expect when none is given: the kind in lowercase with an
/// `s` appended (`Foo` → `foos`, `CronTab` → `crontabs`). No English rules: `Policy` gives
/// `policys`, so such kinds set `plural` themselves.
pub(crate) fn default_plural(kind: &str) -> String {
    format!("{}s", kind.to_lowercase())
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(first) => first.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `printcolumn(name = "...", type = "...", json_path = "...", ...)`.
fn printcolumn(meta: &ParseNestedMeta<'_>) -> syn::Result<PrinterColumn> {
    const USAGE: &str = "write `printcolumn(name = \"Replicas\", type = \"integer\", json_path = \".spec.replicas\")` \
                         (optional: description = \"...\", format = \"...\", priority = 1)";
    if !meta.input.peek(syn::token::Paren) {
        return Err(meta.error(format!("`printcolumn` takes a list: {USAGE}")));
    }
    let mut name = None;
    let mut type_ = None;
    let mut json_path = None;
    let mut description = None;
    let mut format = None;
    let mut priority = None;
    meta.parse_nested_meta(|m| {
        let k = key(&m);
        match k.as_str() {
            "name" => {
                let v = string(&m)?;
                if v.value().is_empty() {
                    return Err(syn::Error::new(v.span(), "a printer column needs a name"));
                }
                once(&mut name, &m, v.value())
            }
            "type" => {
                let v = string(&m)?;
                if !COLUMN_TYPES.contains(&v.value().as_str()) {
                    return Err(syn::Error::new(
                        v.span(),
                        format!(
                            "printer column type {:?} is not one the API server knows: use one of {}",
                            v.value(),
                            COLUMN_TYPES.join(", ")
                        ),
                    ));
                }
                once(&mut type_, &m, v.value())
            }
            "json_path" => {
                let v = string(&m)?;
                check_json_path(&v, "json_path", "e.g. `.spec.replicas`")?;
                once(&mut json_path, &m, v.value())
            }
            "description" => {
                let v = string(&m)?;
                once(&mut description, &m, v.value())
            }
            "format" => {
                let v = string(&m)?;
                once(&mut format, &m, v.value())
            }
            "priority" => {
                let lit: LitInt = m.value()?.parse().map_err(|e| {
                    syn::Error::new(e.span(), "`priority` is a number: write `priority = 1`")
                })?;
                let p: i32 = lit.base10_parse().map_err(|_| {
                    syn::Error::new(lit.span(), "`priority` must fit in an i32")
                })?;
                if p < 0 {
                    return Err(syn::Error::new(
                        lit.span(),
                        "`priority` must be 0 (shown by `kubectl get`) or more (shown with `-o wide`)",
                    ));
                }
                once(&mut priority, &m, p)
            }
            _ => Err(m.error(format!("unknown key `{k}` in printcolumn(...): {USAGE}"))),
        }
    })?;
    let span = meta.path.span();
    let need = |v: Option<String>, what: &str| {
        v.ok_or_else(|| syn::Error::new(span, format!("printcolumn is missing `{what}`: {USAGE}")))
    };
    Ok(PrinterColumn {
        name: need(name, "name")?,
        type_: need(type_, "type")?,
        json_path: need(json_path, "json_path")?,
        description,
        format,
        priority: priority.unwrap_or(0),
    })
}

/// `scale(spec_replicas_path = "...", status_replicas_path = "...", label_selector_path = "...")`.
fn scale(meta: &ParseNestedMeta<'_>) -> syn::Result<Scale> {
    const USAGE: &str = "write `scale(spec_replicas_path = \".spec.replicas\", status_replicas_path = \".status.replicas\")` \
                         (optional: label_selector_path = \".status.selector\")";
    if !meta.input.peek(syn::token::Paren) {
        return Err(meta.error(format!("`scale` takes a list: {USAGE}")));
    }
    let mut spec = None;
    let mut status = None;
    let mut selector = None;
    meta.parse_nested_meta(|m| {
        let k = key(&m);
        let prefixes: &[&str] = match k.as_str() {
            "spec_replicas_path" => &[".spec."],
            "status_replicas_path" => &[".status."],
            "label_selector_path" => &[".spec.", ".status."],
            _ => return Err(m.error(format!("unknown key `{k}` in scale(...): {USAGE}"))),
        };
        let v = string(&m)?;
        let text = v.value();
        if !prefixes
            .iter()
            .any(|p| text.starts_with(p) && text.len() > p.len())
        {
            return Err(syn::Error::new(
                v.span(),
                format!(
                    "`{k}` must be a JSON path under {} (the API server's rule), e.g. `{}replicas`",
                    prefixes.join(" or "),
                    prefixes[0]
                ),
            ));
        }
        match k.as_str() {
            "spec_replicas_path" => once(&mut spec, &m, text),
            "status_replicas_path" => once(&mut status, &m, text),
            _ => once(&mut selector, &m, text),
        }
    })?;
    let span = meta.path.span();
    Ok(Scale {
        spec_replicas_path: spec.ok_or_else(|| {
            syn::Error::new(
                span,
                format!("scale is missing `spec_replicas_path`: {USAGE}"),
            )
        })?,
        status_replicas_path: status.ok_or_else(|| {
            syn::Error::new(
                span,
                format!("scale is missing `status_replicas_path`: {USAGE}"),
            )
        })?,
        label_selector_path: selector,
    })
}

/// An API group: a lowercase DNS subdomain with at least one dot (the API server's rule for
/// custom resources).
fn check_group(lit: &LitStr) -> syn::Result<()> {
    let g = lit.value();
    let labels_ok = g.split('.').all(is_dns_label);
    if g.is_empty() || !g.contains('.') || !labels_ok || g.len() > 253 {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "group {g:?} is not a valid API group for a custom resource: it must be a lowercase \
                 domain name with at least one dot, e.g. `samplecontroller.k8s.io` or `example.com`"
            ),
        ));
    }
    Ok(())
}

fn check_dns_label(lit: &LitStr, what: &str, example: &str) -> syn::Result<()> {
    let v = lit.value();
    if !is_dns_label(&v) {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "{what} {v:?} is not valid: it must be a DNS label (lowercase letters, digits and \
                 '-', starting with a letter, at most 63 characters), {example}"
            ),
        ));
    }
    Ok(())
}

fn check_json_path(lit: &LitStr, what: &str, example: &str) -> syn::Result<()> {
    let v = lit.value();
    if !v.starts_with('.') || v.len() < 2 {
        return Err(syn::Error::new(
            lit.span(),
            format!("{what} {v:?} must be a JSON path starting with '.', {example}"),
        ));
    }
    Ok(())
}

/// RFC 1035 label: lowercase alphanumerics and '-', starting with a letter, ending with an
/// alphanumeric, 1-63 characters.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use syn::DeriveInput;

    fn options(src: &str) -> syn::Result<Options> {
        let input: DeriveInput = syn::parse_str(src).expect("test input parses");
        parse(&input.attrs, &input.ident)
    }

    fn error(src: &str) -> String {
        match options(src) {
            Ok(_) => panic!("{src} should not parse"),
            Err(e) => e.to_string(),
        }
    }

    fn error_of(src: &str) -> syn::Error {
        match options(src) {
            Ok(_) => panic!("{src} should not parse"),
            Err(e) => e,
        }
    }

    #[test]
    fn minimal_attribute_gets_defaults() {
        let o = options(
            r#"#[resource(group = "samplecontroller.k8s.io", version = "v1alpha1", kind = "Foo")]
               struct FooSpec {}"#,
        )
        .unwrap();
        assert_eq!(o.group, "samplecontroller.k8s.io");
        assert_eq!(o.version, "v1alpha1");
        assert_eq!(o.kind, "Foo");
        assert_eq!(o.plural, "foos");
        assert_eq!(o.singular, "foo");
        assert!(!o.namespaced);
        assert!(o.served);
        assert!(!o.storage);
        assert!(o.status.is_none());
        let krate = &o.krate;
        assert_eq!(quote::quote!(#krate).to_string(), ":: kctrl_client");
    }

    #[test]
    fn every_key_is_read() {
        let o = options(
            r#"#[resource(group = "example.com", version = "v2", kind = "CronTab", namespaced,
                          status = "CronTabStatus", plural = "crontabz", singular = "crontab",
                          shortname = "ct", shortname = "cts", category = "all",
                          printcolumn(name = "Spec", type = "string", json_path = ".spec.cronSpec",
                                      description = "the schedule", priority = 1, format = "byte"),
                          scale(spec_replicas_path = ".spec.replicas",
                                status_replicas_path = ".status.replicas",
                                label_selector_path = ".status.selector"),
                          selectable_field = ".spec.cronSpec",
                          derive = "PartialEq", derive = "Default", storage, served = false,
                          deprecated, deprecation_warning = "use v3",
                          annotation("a.example.com/x", "1"), label("team", "web"),
                          crate = "crate")]
               #[resource(shortname = "c")]
               pub struct CronTabSpec {}"#,
        )
        .unwrap();
        assert!(o.namespaced && o.storage && !o.served && o.deprecated);
        assert_eq!(o.plural, "crontabz");
        assert_eq!(o.shortnames, ["ct", "cts", "c"]);
        assert_eq!(o.categories, ["all"]);
        assert_eq!(o.printcolumns.len(), 1);
        let c = &o.printcolumns[0];
        assert_eq!(
            (c.name.as_str(), c.type_.as_str(), c.json_path.as_str()),
            ("Spec", "string", ".spec.cronSpec")
        );
        assert_eq!(c.priority, 1);
        assert_eq!(c.format.as_deref(), Some("byte"));
        let s = o.scale.as_ref().unwrap();
        assert_eq!(s.label_selector_path.as_deref(), Some(".status.selector"));
        assert_eq!(o.selectable_fields, [".spec.cronSpec"]);
        assert_eq!(o.derives.len(), 2);
        assert_eq!(o.deprecation_warning.as_deref(), Some("use v3"));
        assert_eq!(o.annotations, [("a.example.com/x".into(), "1".into())]);
        assert_eq!(o.labels, [("team".into(), "web".into())]);
    }

    #[test]
    fn default_plural_is_lowercase_kind_plus_s() {
        assert_eq!(default_plural("Foo"), "foos");
        assert_eq!(default_plural("CronTab"), "crontabs");
        assert_eq!(default_plural("Policy"), "policys");
    }

    #[test]
    fn missing_attribute_or_key_says_what_to_write() {
        assert!(error("struct FooSpec {}").contains("needs a #[resource(...)] attribute"));
        let e = error(r#"#[resource(version = "v1", kind = "Foo")] struct FooSpec {}"#);
        assert!(e.contains("missing `group`"), "{e}");
        assert!(e.contains("group = \"example.com\""), "{e}");
        let e = error(r#"#[resource(group = "a.io", kind = "Foo")] struct FooSpec {}"#);
        assert!(e.contains("missing `version`"), "{e}");
        let e = error(r#"#[resource(group = "a.io", version = "v1")] struct FooSpec {}"#);
        assert!(e.contains("missing `kind`"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_the_fix() {
        let base = |extra: &str| {
            error(&format!(
                r#"#[resource(group = "a.io", version = "v1", kind = "Foo", {extra})] struct FooSpec {{}}"#
            ))
        };
        assert!(base(r#"colour = "red""#).contains("unknown key `colour`"));
        assert!(base(r#"plural = "Foos""#).contains("plural \"Foos\" is not valid"));
        assert!(base(r#"shortname = "f_o""#).contains("shortname \"f_o\""));
        assert!(base(r#"namespaced, namespaced"#).contains("given twice"));
        assert!(base(r#"namespaced = "yes""#).contains("is a flag"));
        assert!(base(r#"plural = foos"#).contains("takes a string literal"));
        assert!(base(r#"derive = "Clone""#).contains("always derived"));
        assert!(base(r#"derive = "Serialize""#).contains("is generated"));
        assert!(base(r#"status = "not a type!""#).contains("names the status type"));
        assert!(
            base(r#"printcolumn(name = "A", type = "int", json_path = ".spec.a")"#)
                .contains("use one of integer, number, string, boolean, date")
        );
        assert!(
            base(r#"printcolumn(name = "A", type = "integer")"#).contains("missing `json_path`")
        );
        assert!(
            base(r#"printcolumn(name = "A", type = "integer", json_path = "spec.a")"#)
                .contains("must be a JSON path starting with '.'")
        );
        assert!(
            base(r#"printcolumn(name = "A", type = "integer", json_path = ".a", priority = -1)"#)
                .contains("priority")
        );
        assert!(base(r#"printcolumn = "x""#).contains("takes a list"));
        assert!(
            base(r#"scale(spec_replicas_path = ".status.r", status_replicas_path = ".status.r")"#)
                .contains("under .spec.")
        );
        assert!(
            base(r#"scale(spec_replicas_path = ".spec.r")"#)
                .contains("missing `status_replicas_path`")
        );
        assert!(
            base(r#"scale(spec_replicas_path = ".spec.r", status_replicas_path = ".status.r")"#)
                .contains("no `status = \"...\"` type")
        );
        assert!(base(r#"annotation("k")"#).contains("annotation(\"key\", \"value\")"));
        assert!(base(r#"deprecation_warning = "x""#).contains("add `deprecated`"));
        assert!(base(r#"plural = "foo""#).contains("both \"foo\""));
    }

    #[test]
    fn group_version_and_kind_are_checked() {
        let e = error(
            r#"#[resource(group = "example", version = "v1", kind = "Foo")] struct FooSpec {}"#,
        );
        assert!(e.contains("at least one dot"), "{e}");
        let e = error(
            r#"#[resource(group = "Example.com", version = "v1", kind = "Foo")] struct FooSpec {}"#,
        );
        assert!(e.contains("lowercase domain name"), "{e}");
        let e =
            error(r#"#[resource(group = "a.io", version = "V1", kind = "Foo")] struct FooSpec {}"#);
        assert!(e.contains("version \"V1\""), "{e}");
        let e = error(
            r#"#[resource(group = "a.io", version = "v1", kind = "My-kind")] struct FooSpec {}"#,
        );
        assert!(e.contains("not CamelCase") && e.contains("`Mykind`"), "{e}");
        let e =
            error(r#"#[resource(group = "a.io", version = "v1", kind = "foo")] struct FooSpec {}"#);
        assert!(e.contains("uppercase letter") && e.contains("`Foo`"), "{e}");
        let e = error(r#"#[resource(group = "a.io", version = "v1", kind = "Foo")] struct Foo {}"#);
        assert!(e.contains("rename the struct (e.g. `FooSpec`)"), "{e}");
        let e = error(
            r#"#[resource(group = "a.io", version = "v1", kind = "Foo", struct_name = "a b")] struct FooSpec {}"#,
        );
        assert!(
            e.contains("struct_name \"a b\" is not a Rust identifier"),
            "{e}"
        );
        let o = options(r#"#[resource(group = "a.io", version = "v1", kind = "Foo", struct_name = "OldFoo")] struct Foo {}"#)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (o.kind.as_str(), o.struct_ident.to_string().as_str()),
            ("Foo", "OldFoo")
        );
    }

    #[test]
    fn errors_span_the_offending_value() {
        let src = r#"#[resource(group = "a.io", version = "v1", kind = "Foo", plural = "Foos")] struct FooSpec {}"#;
        let err = error_of(src);
        let start = err.span().start();
        assert_eq!(start.line, 1);
        assert_eq!(start.column, src.find("\"Foos\"").unwrap());
        // A missing key points at the struct's name.
        let src = r#"#[resource(version = "v1", kind = "Foo")] struct FooSpec {}"#;
        let err = error_of(src);
        assert_eq!(err.span().start().column, src.find("FooSpec").unwrap());
    }
}
