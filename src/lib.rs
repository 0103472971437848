//! cudaperf
