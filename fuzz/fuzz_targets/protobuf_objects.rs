//! Fuzz target `protobuf_objects`: see `kctrl_fuzz::protobuf_objects` for the properties checked.
#![cfg_attr(fuzzing, no_main)]

kctrl_fuzz::fuzz_target!(kctrl_fuzz::protobuf_objects::check);
