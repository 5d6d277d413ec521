//! Unit tests of the gate's rules on hand-made inputs; the real fixtures are in tests/gate.rs.
