//! The generator's emission: decoder and encoder functions, field by field.

use super::*;

impl Generator {
    pub(crate) fn run(mut self) -> Result<Generated> {
        let mut impls = Vec::new();
        let mut news = BTreeMap::new();
        for (package, name) in ROOTS {
            let module = rust_module(package)?;
            self.push(Job {
                go: GoKey {
                    package: (*package).into(),
                    name: (*name).into(),
                },
                rust_module: module.into(),
                rust_name: (*name).into(),
            });
            let path = rust_path(module, name);
            impls.push(Item::fixed(
                format!("impl {name}"),
                format!(
                    "\nimpl FromProtobuf for {path} {{\n    fn from_protobuf(message: &[u8]) -> Result<Self, ProtobufError> {{\n        let mut object = {new}();\n        {merge}(Reader::new(message, \"{name}\"), &mut object)?;\n        Ok(object)\n    }}\n}}\n\nimpl ToProtobuf for {path} {{\n    fn to_protobuf(&self) -> Option<Vec<u8>> {{\n        let mut w = Writer::default();\n        {encode}(self, &mut w);\n        w.finish()\n    }}\n}}\n",
                    new = new_function(module, name),
                    merge = merge_function(module, name),
                    encode = encode_name(&merge_function(module, name)),
                ),
            ));
        }
        let mut body = Vec::new();
        while let Some(job) = self.queue.pop_front() {
            body.extend(self.job(&job, &mut news)?);
        }
        let text = |items: &[Item]| -> String {
            items
                .iter()
                .map(|i| format!("{}{}{}", i.head, i.units.concat(), i.tail))
                .collect()
        };
        let (body_text, impls_text) = (text(&body), text(&impls));
        // Constructors: every struct a merge function fills, with the values JSON always writes.
        let mut constructors = Vec::new();
        for ((module, name), inits) in news {
            let path = rust_path(&module, &name);
            let f = new_function(&module, &name);
            if !body_text.contains(&format!("{f})"))
                && !body_text.contains(&format!("{f}()"))
                && !impls_text.contains(&format!("{f}()"))
            {
                continue;
            }
            constructors.push(Item {
                key: f.clone(),
                head: format!("\nfn {f}() -> {path} {{\n    {path} {{\n"),
                units: inits.iter().map(|i| format!("        {i},\n")).collect(),
                tail: "        ..Default::default()\n    }\n}\n".to_owned(),
                constructor: Some(format!(
                    "\nfn {f}() -> {path} {{\n    Default::default()\n}}\n"
                )),
            });
        }
        let helpers = HELPERS
            .iter()
            .copied()
            .filter(|h| body_text.contains(&format!("{h}(")))
            .collect();
        let mut items = impls;
        items.extend(constructors);
        items.extend(body);
        Ok(Generated {
            items,
            skipped: self.skipped,
            helpers,
        })
    }

    pub(crate) fn push(&mut self, job: Job) {
        if self.done.insert(job.clone()) {
            self.queue.push_back(job);
        }
    }

    /// The decoder and the encoder of one struct.
    pub(crate) fn job(
        &mut self,
        job: &Job,
        news: &mut BTreeMap<(String, String), Vec<String>>,
    ) -> Result<[Item; 2]> {
        let go_fields = self
            .go
            .structs
            .get(&job.go)
            .ok_or_else(|| anyhow!("Go struct {}.{} not found", job.go.package, job.go.name))?
            .clone();
        let rust_fields = self.rust.fields(&job.rust_module, &job.rust_name)?;
        let inlined = job.go.name != job.rust_name;
        let mut out = Emitted::default();
        self.fields(job, &go_fields, &rust_fields, &mut out)?;
        let Emitted {
            arms,
            mut inits,
            mut filled,
            mut writes,
        } = out;
        // Fields in ascending number, as Go's marshaller writes them.
        writes.sort_by_key(|(n, _)| *n);
        if inlined {
            // The struct it is inlined into checks its fields and sets their initial values.
            inits.clear();
            filled.extend(rust_fields.keys().cloned());
        }
        // Fields of inlined structs are filled by their own merge functions; count them too.
        for f in &go_fields {
            if f.inline {
                let inner = self
                    .go
                    .structs
                    .get(&f.element()?)
                    .cloned()
                    .unwrap_or_default();
                collect_inline(&self.go, &inner, &mut filled)?;
            }
        }
        for json in rust_fields.keys() {
            let allowed = job.rust_name == "ObjectMeta" && json == "managedFields";
            if !filled.contains(json) && !allowed {
                bail!(
                    "{}::{}: no Go field fills {json}",
                    job.rust_module,
                    job.rust_name
                );
            }
        }
        let key = (job.rust_module.clone(), job.rust_name.clone());
        news.entry(key).or_default().extend(inits);
        let path = rust_path(&job.rust_module, &job.rust_name);
        let merge = job.function();
        let encode = encode_name(&merge);
        let decoder = Item {
            key: merge.clone(),
            head: format!(
                "\n/// Reads Go's `{}.{}` into `{}`.\npub(super) fn {merge}(mut r: Reader<'_>, m: &mut {path}) -> Result<(), ProtobufError> {{\n    while let Some((field, wire)) = r.field()? {{\n        match field {{\n",
                job.go.package, job.go.name, job.rust_name,
            ),
            units: arms,
            tail: "            _ => r.skip(wire)?,\n        }\n    }\n    Ok(())\n}\n".to_owned(),
            constructor: None,
        };
        let encoder = Item {
            key: encode.clone(),
            head: format!(
                "\n/// Writes `{}` as Go's `{}.{}`.\nfn {encode}(m: &{path}, w: &mut Writer) {{\n",
                job.rust_name, job.go.package, job.go.name,
            ),
            units: writes
                .into_iter()
                .map(|(_, w)| format!("    {w}\n"))
                .collect(),
            tail: "}\n".to_owned(),
            constructor: None,
        };
        Ok([decoder, encoder])
    }

    pub(crate) fn fields(
        &mut self,
        job: &Job,
        go_fields: &[GoField],
        rust_fields: &BTreeMap<String, RustField>,
        out: &mut Emitted,
    ) -> Result<()> {
        let Emitted {
            arms,
            inits,
            filled,
            writes,
        } = out;
        for g in go_fields {
            if g.inline {
                let inner = g.element()?;
                let inner_job = Job {
                    go: inner.clone(),
                    rust_module: job.rust_module.clone(),
                    rust_name: job.rust_name.clone(),
                };
                arms.push(format!(
                    "            {} => {}(r.message(wire)?, m)?,\n",
                    g.number,
                    inner_job.function()
                ));
                writes.push((
                    g.number,
                    format!(
                        "w.message({}, |w| {}(m, w));",
                        g.number,
                        encode_name(&inner_job.function())
                    ),
                ));
                // The constructor also sets what the inlined struct's JSON always writes.
                let inner_fields = self
                    .go
                    .structs
                    .get(&inner)
                    .cloned()
                    .ok_or_else(|| anyhow!("inline {}", inner.name))?;
                for f in &inner_fields {
                    let init = rust_fields.get(&f.json).and_then(|r| {
                        Field {
                            go: f,
                            rust: r.clone(),
                        }
                        .init()
                    });
                    inits.extend(init);
                }
                self.push(inner_job);
                continue;
            }
            if job.rust_name == "ObjectMeta" && g.json == "managedFields" {
                arms.push(format!(
                    "            {} => r.skip(wire)?, // managedFields: not kept\n",
                    g.number
                ));
                // Not written either: an object that carries them is sent as JSON.
                writes.push((
                    g.number,
                    "if m.managed_fields.is_some() {\n        w.unsupported();\n    }".to_owned(),
                ));
                continue;
            }
            let Some(rust) = rust_fields.get(&g.json) else {
                self.skipped.push(format!(
                    "{}.{}.{} ({})",
                    job.go.package, job.go.name, g.json, g.number
                ));
                continue;
            };
            filled.insert(g.json.clone());
            let field = Field {
                go: g,
                rust: rust.clone(),
            };
            if let Some(init) = field.init() {
                inits.push(init);
            }
            let assign = self.assign(&field)?;
            arms.push(format!("            {} => {assign},\n", g.number));
            writes.push((g.number, write_statement(&field)?));
        }
        Ok(())
    }

    /// The statement that reads field `f` from `r` (its wire type in `wire`) into `m`.
    pub(crate) fn assign(&mut self, f: &Field<'_>) -> Result<String> {
        let name = &f.rust.name;
        let g = f.go;
        Ok(match &f.rust.ty {
            RustType::Vec(elem) => {
                let target = format!("&mut m.{name}");
                match **elem {
                    RustType::I32 | RustType::I64 if !f.rust.optional => {
                        bail!("required list of integers {}", g.json)
                    }
                    RustType::I32 => return Ok(format!("r.int32s(wire, {target})?")),
                    RustType::I64 => return Ok(format!("r.int64s(wire, {target})?")),
                    _ => {}
                }
                let value = self.value(elem, g)?;
                match **elem {
                    _ if f.rust.optional => format!("push({target}, {value})"),
                    _ => format!("super::push(&mut m.{name}, {value})"),
                }
            }
            RustType::Map(value) => {
                let read = match **value {
                    RustType::String => "|r, w| r.string(w)",
                    RustType::Quantity => "|r, w| quantity(r.message(w)?)",
                    _ => bail!("map of {value:?} in {} is not supported", g.json),
                };
                if !f.rust.optional {
                    bail!("required map {}", g.json);
                }
                format!(
                    "{{\n                let (k, v) = r.entry(wire, {read})?;\n                m.{name}.get_or_insert_with(Default::default).insert(k, v);\n            }}"
                )
            }
            RustType::Struct(module, ty) => {
                let merge = self.struct_job(module, ty, g)?;
                if f.rust.optional {
                    format!(
                        "{merge}(r.message(wire)?, m.{name}.get_or_insert_with({}))?",
                        new_function(module, ty)
                    )
                } else {
                    format!("{merge}(r.message(wire)?, &mut m.{name})?")
                }
            }
            RustType::Time => {
                if !f.rust.optional {
                    bail!("required time {}", g.json);
                }
                format!("m.{name} = time(r.message(wire)?)?")
            }
            scalar => {
                let value = self.value(scalar, g)?;
                if !f.rust.optional {
                    format!("m.{name} = {value}")
                } else if g.pointer()
                    || !g.omitempty
                    || matches!(scalar, RustType::Quantity | RustType::IntOrString)
                {
                    format!("m.{name} = Some({value})")
                } else {
                    match scalar {
                        RustType::String | RustType::I32 | RustType::I64 | RustType::Bool => {
                            format!("m.{name} = nonzero({value})")
                        }
                        other => bail!("omitempty {other:?} in {}", g.json),
                    }
                }
            }
        })
    }

    /// An expression reading one value of type `ty` (not a list or map).
    pub(crate) fn value(&mut self, ty: &RustType, g: &GoField) -> Result<String> {
        Ok(match ty {
            RustType::String => "r.string(wire)?".into(),
            RustType::I32 => "r.int32(wire)?".into(),
            RustType::I64 => "r.int64(wire)?".into(),
            RustType::Bool => "r.bool(wire)?".into(),
            RustType::Quantity => "quantity(r.message(wire)?)?".into(),
            RustType::IntOrString => "int_or_string(r.message(wire)?)?".into(),
            RustType::Struct(module, name) => {
                let merge = self.struct_job(module, name, g)?;
                format!(
                    "{{\n                let mut v = {}();\n                {merge}(r.message(wire)?, &mut v)?;\n                v\n            }}",
                    new_function(module, name)
                )
            }
            other => bail!("list of {other:?} in {} is not supported", g.json),
        })
    }

    /// Queues the merge function of a struct field's type; returns its name.
    pub(crate) fn struct_job(&mut self, module: &str, name: &str, g: &GoField) -> Result<String> {
        let go = g.element()?;
        if go.name != name {
            bail!(
                "Go type {} of field {} is not Rust's {name}",
                go.name,
                g.json
            );
        }
        let job = Job {
            go,
            rust_module: module.to_owned(),
            rust_name: name.to_owned(),
        };
        let f = job.function();
        self.push(job);
        Ok(f)
    }
}

/// The encoder's name of a merge function.
pub(crate) fn encode_name(merge: &str) -> String {
    merge.replacen("merge_", "encode_", 1)
}

/// The statement that writes field `f` of `m` to `w`: every value the Rust struct holds,
/// `None` left out (so what JSON leaves out, protobuf leaves out too).
pub(crate) fn write_statement(f: &Field<'_>) -> Result<String> {
    let n = f.go.number;
    let name = &f.rust.name;
    let one = |ty: &RustType, v: &str| -> Result<String> {
        // A copied scalar: `&m.x` read as `m.x`, a reference `v` as `*v`.
        let copied = v
            .strip_prefix('&')
            .map_or_else(|| format!("*{v}"), str::to_owned);
        Ok(match ty {
            RustType::String => format!("w.string({n}, {v})"),
            RustType::I32 => format!("w.int32({n}, {copied})"),
            RustType::I64 => format!("w.int64({n}, {copied})"),
            RustType::Bool => format!("w.bool({n}, {copied})"),
            RustType::Quantity => format!("write_quantity(w, {n}, {v})"),
            RustType::IntOrString => format!("write_int_or_string(w, {n}, {v})"),
            RustType::Time => format!("write_time(w, {n}, {v})"),
            RustType::Struct(module, ty) => format!(
                "w.message({n}, |w| {}({v}, w))",
                encode_name(&merge_function(module, ty))
            ),
            other => bail!("cannot write {other:?} of {}", f.go.json),
        })
    };
    Ok(match &f.rust.ty {
        RustType::Vec(elem) => {
            let list = if f.rust.optional {
                format!("m.{name}.iter().flatten()")
            } else {
                format!("&m.{name}")
            };
            format!("for v in {list} {{\n        {};\n    }}", one(elem, "v")?)
        }
        RustType::Map(value) => {
            let value = match **value {
                RustType::String => "w.string(2, v)".to_owned(),
                RustType::Quantity => "write_quantity(w, 2, v)".to_owned(),
                ref other => bail!("cannot write a map of {other:?}"),
            };
            format!(
                "for (k, v) in m.{name}.iter().flatten() {{\n        w.message({n}, |w| {{\n            w.string(1, k);\n            {value};\n        }});\n    }}"
            )
        }
        ty if f.rust.optional => {
            format!(
                "if let Some(v) = &m.{name} {{\n        {};\n    }}",
                one(ty, "v")?
            )
        }
        ty => format!("{};", one(ty, &format!("&m.{name}"))?),
    })
}

impl Field<'_> {
    /// The constructor's value for a field JSON always writes: a non-pointer scalar without
    /// `omitempty` (protobuf always writes it too, but an older server might not).
    pub(crate) fn init(&self) -> Option<String> {
        if !self.rust.optional || self.go.pointer() || self.go.omitempty {
            return None;
        }
        let zero = match self.rust.ty {
            RustType::String => "String::new()",
            RustType::I32 | RustType::I64 => "0",
            RustType::Bool => "false",
            _ => return None,
        };
        Some(format!("{}: Some({zero})", self.rust.name))
    }
}

/// The JSON names of the fields of an inlined struct (and of structs inlined in it).
pub(crate) fn collect_inline(
    go: &GoTypes,
    fields: &[GoField],
    out: &mut BTreeSet<String>,
) -> Result<()> {
    for f in fields {
        if f.inline {
            let inner = go.structs.get(&f.element()?).cloned().unwrap_or_default();
            collect_inline(go, &inner, out)?;
        } else {
            out.insert(f.json.clone());
        }
    }
    Ok(())
}
