//! Fuzz target `status`: see `kctrl_fuzz::status` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::status::check);
