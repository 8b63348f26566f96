//! Fuzz target `go_duration`: see `kctrl_fuzz::go_duration` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::go_duration::check);
