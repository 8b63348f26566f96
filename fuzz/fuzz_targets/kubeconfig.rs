//! Fuzz target `kubeconfig`: see `kctrl_fuzz::kubeconfig` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::kubeconfig::check);
