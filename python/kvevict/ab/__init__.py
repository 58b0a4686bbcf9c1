"""kvevict.ab: the adopter's A/B of eviction arms on a team's own tasks
(``python -m kvevict.ab``; docs/AB.md): accuracy by bucket with intervals
and paired tests against ``full``, next to throughput, latency, KV memory,
output length and failures, through transformers (kvevict.hf, kvpress's
presses) or vLLM (the kvevict plugin). tiny.py and train.py make the
shipped tiny model and task suite that show it measuring something."""
