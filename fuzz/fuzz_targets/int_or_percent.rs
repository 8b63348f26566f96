//! Fuzz target `int_or_percent`: see `kctrl_fuzz::int_or_percent` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::int_or_percent::check);
