//! tdsl-cpu: the CPU backend (being written).
