//! Fuzz target `object_meta`: see `kctrl_fuzz::object_meta` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::object_meta::check);
