"""What the attention backend needs of the step the runner planned: one
object per process, set by the runner before the model's forward and cleared
after it (vLLM's forward context holds no room for it; a module attribute
read by the backend is this plugin's own channel, nothing of vLLM's)."""
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class PlannedStep:
    state: Any          #: kvevict.State
    buf: Any            #: kvevict.Step of this step
    n_tokens: int       #: tokens of the step (the state's call)
    token_row: Any      #: int32 [n_tokens]: each token's batch index (block-table row)
    block_table: Any    #: int32 [num_reqs, blocks_per_row]
    layer_index: dict   #: attention layer name -> the state's layer
    n_rows: int = 0     #: requests of the step (the state's call rows)
    writers: Optional[dict] = None  #: layer -> its kve_cache_write descriptor (attention.py)


current: Optional[PlannedStep] = None
