//! Fuzz target `exec_credential`: see `kctrl_fuzz::exec_credential` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::exec_credential::check);
