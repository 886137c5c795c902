"""The chaos soak: a whole fleet on this machine, driven by load, with faults injected at random
(seeded) and invariants checked from a ledger the fleet never touches. Its pieces, one module each:
`proxy` (a fault proxy per link: latency, stall, cut)."""
