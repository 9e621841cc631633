//! The github connector against a local fake of its API (being built).
