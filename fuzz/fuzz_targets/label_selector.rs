//! Fuzz target `label_selector`: see `kctrl_fuzz::label_selector` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::label_selector::check);
