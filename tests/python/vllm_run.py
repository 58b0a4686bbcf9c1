"""One vLLM engine for test_vllm_plugin.py, in this process (vLLM's in-process
engine core, so the plugin's runner can be looked at): prints one JSON line,
RESULT {...}. argv[1]: a JSON job: model, device ("cpu", or "cuda": bf16,
FlashAttention, or `backend` "FLASHINFER"), arm ("stock" or a kvevict arm),
kvevict settings, prompts [[token ids]], max_tokens [n per prompt], abort
(indices of requests aborted after `abort_after` engine steps)."""
import json
import os
import sys

GPU = json.loads(sys.argv[1]).get("device") == "cuda" if len(sys.argv) > 1 else False
for k, v in ((("VLLM_ENABLE_V1_MULTIPROCESSING", "0"), ("VLLM_USE_V2_MODEL_RUNNER", "0")) +
             (() if GPU else (("VLLM_TARGET_DEVICE", "cpu"), ("VLLM_CPU_KVCACHE_SPACE", "1"),
                              ("VLLM_CPU_OMP_THREADS_BIND", "nobind")))):
    os.environ.setdefault(k, v)

from vllm import LLM, SamplingParams  # noqa: E402


def main(job):
    kw = dict(enable_prefix_caching=False, async_scheduling=False)
    if job["arm"] != "stock":
        import kvevict.vllm as kv
        kw.update(kv.engine_args(arm=job["arm"], device="cuda" if GPU else "cpu",
                                 **job.get("kvevict", {})))
    if job.get("prefix"):
        kw["enable_prefix_caching"] = True
    if job.get("backend"):  # a GPU: "FLASH_ATTN" or "FLASHINFER"
        kw["attention_backend"] = job["backend"]
    if job.get("blocks"):
        kw["num_gpu_blocks_override"] = job["blocks"]
    llm = LLM(model=job["model"], skip_tokenizer_init=True,
              dtype="bfloat16" if GPU else "float32", max_model_len=512,
              enforce_eager=True, max_num_seqs=job.get("max_num_seqs", 8), block_size=32,
              seed=0, **kw)
    eng = llm.llm_engine
    rounds = {}
    if job["arm"] != "stock":
        from kvevict.vllm import runner

        def observe(req_id, state, row):  # each request's first round: its kept positions
            info = state.seq(row)
            if info.round == 1:
                t = state.slots(row)[:, :, :info.n_valid]
                rounds[str(info.seq_id)] = dict(n_tokens=info.n_tokens, kept=t.tolist())
        for r in runner.live_runners:
            if r.kve is not None:
                r.kve.observer = observe
    outs, lps = {}, {}
    ids = ["req-%d" % i for i in range(len(job["prompts"]))]

    def add(i):
        extra = {"kvevict_seq_id": 1000 + i}
        if job.get("request_arms") and job["request_arms"][i]:
            extra["kvevict_arm"] = job["request_arms"][i]
        sp = SamplingParams(max_tokens=job["max_tokens"][i], temperature=0, ignore_eos=True,
                            detokenize=False, extra_args=extra, logprobs=job.get("logprobs"))
        eng.add_request(ids[i], {"prompt_token_ids": job["prompts"][i]}, sp)

    # requests arrive `arrive` a step on average (all at once by default);
    # abort_at: {index: the step after which it is aborted}
    rate = job.get("arrive") or len(ids)
    abort_at = {int(k): v for k, v in job.get("abort_at", {}).items()}
    abort_at.update({i: job["abort_after"] for i in job.get("abort", [])})
    added, steps, peak_rows = 0, 0, 0
    kve = None
    while added < len(ids) or eng.has_unfinished_requests():
        due = min(len(ids), max(1, int((steps + 1) * rate)))
        for i in range(added, due):
            add(i)
        added = max(added, due)
        for o in eng.step():
            if o.finished:
                outs[o.request_id] = list(o.outputs[0].token_ids)
                if o.outputs[0].logprobs is not None:
                    lps[o.request_id] = [{str(t): float(v.logprob) for t, v in d.items()}
                                         for d in o.outputs[0].logprobs]
        steps += 1
        gone = [ids[i] for i, s in abort_at.items() if s == steps and ids[i] not in outs]
        if gone:
            eng.abort_request(gone)
        if kve is None and job["arm"] != "stock":
            from kvevict.vllm import runner
            kve = next((r.kve for r in runner.live_runners if r.kve is not None), None)
        if kve is not None:
            peak_rows = max(peak_rows, len(kve.rows))
    if job.get("bad_arm"):  # a request whose arm the engine does not take
        try:
            eng.add_request("bad", {"prompt_token_ids": [1, 2, 3]},
                            SamplingParams(max_tokens=2, extra_args={"kvevict_arm":
                                                                     job["bad_arm"]}))
            while eng.has_unfinished_requests():
                eng.step()
            rounds["bad_arm_error"] = ""
        except Exception as e:  # noqa: BLE001  (what the caller sees)
            rounds["bad_arm_error"] = str(e)
    res = {"tokens": [outs.get(r) for r in ids], "steps": steps, "first_rounds": rounds,
           "logprobs": [lps.get(r) for r in ids], "peak_rows": peak_rows}
    # what vLLM's scheduler still holds: blocks in use, the plugin's capped requests
    sched = eng.engine_core.engine_core.scheduler
    pool = sched.kv_cache_manager.block_pool
    res.update(blocks_total=pool.num_gpu_blocks - 1, blocks_free=pool.get_num_free_blocks(),
               caps_left=len(getattr(sched.kv_cache_manager, "_caps", {})))
    if job["arm"] != "stock":
        from kvevict.vllm import runner
        rs = [r for r in runner.live_runners if r.kve is not None]
        if rs:
            kve = rs[0].kve
            for req_id in list(kve.rows):  # the last step's: recorded as retire records them
                kve.retire(req_id)
                res["left_last_step"] = res.get("left_last_step", 0) + 1
            res.update(left_rows=res.get("left_last_step", 0), free_rows=len(kve.free),
                       preemptions=kve.preemptions,
                       digests=list(kve.digests.values()), held_rows=len(kve.rows))
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
