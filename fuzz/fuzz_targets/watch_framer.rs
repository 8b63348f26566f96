//! Fuzz target `watch_framer`: see `kctrl_fuzz::watch_framer` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::watch_framer::check);
