"""The chaos soak: a whole fleet on this machine, driven by load, with faults injected at random
(seeded) and invariants checked from a ledger the fleet never touches. `python -m bench.soak
--minutes N --seed S --report FILE` (or `make soak`). Its pieces, one module each: `hosts` (a network
namespace per role), `proxy` (a fault proxy per link: latency, stall, cut), `fleet` (the processes),
`agents` (the agent and tools under test), `model` (the scripted model), `load` (the clients),
`faults` (the schedule and the injector), `evidence`, `checks` (the invariants) and `report`."""
