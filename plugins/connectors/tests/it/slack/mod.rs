//! The slack connector against a local fake of its API (being built).
