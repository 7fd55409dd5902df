//! Random workloads with invariant checks (see the module docs once written).
