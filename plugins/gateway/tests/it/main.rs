//! The gateway crate's integration tests: source pools over real child processes and real
//! HTTP servers on 127.0.0.1.

mod pool;
