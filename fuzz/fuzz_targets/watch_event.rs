//! Fuzz target `watch_event`: see `kctrl_fuzz::watch_event` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::watch_event::check);
