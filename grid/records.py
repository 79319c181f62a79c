"""The typed records that cross the engine boundary: a resolved model variant and the run it belongs to.

The driver resolves every default once (``grid.spec`` for a config, ``ModelVariant.from_settings`` for
frozen settings of any format) and hands engine actors these frozen dataclasses, so no engine guesses a
default again. Both are plain picklable dataclasses: Ray ships them to workers as they are. Their dict
fields (``extra_body``, ``chat_template_kwargs``, ``engine_args``) are read-only by convention.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields


@dataclass(frozen=True)
class ModelVariant:
    """One model variant of an experiment (model + effort/overrides), named by a unique label; every field
    resolved (no None that an engine would have to fill in)."""

    label: str
    """Unique in the experiment; the first probe_id component."""
    model: str
    """As written in config.json: local path, hub id, packaged alias, or an API model name."""
    backend: str = "hf"
    """Engine backend: hf, vllm (in-process) or openai, anthropic (streaming HTTP)."""
    dtype: str = "float32"
    """Weights' dtype for in-process engines (float32, bfloat16, float16, auto)."""
    device: str = "cpu"
    """torch device of in-process engines (cpu, cuda, cuda:1 …)."""
    effort: str | None = None
    """Reasoning effort sent to the model (None: none); part of the default label."""
    extra_body: dict = field(default_factory=dict)
    """Provider/engine extras merged into the request, recorded verbatim."""
    chat_template_kwargs: dict = field(default_factory=dict)
    """Keyword arguments for the chat template (e.g. enable_thinking)."""
    temperature: float = 0.0
    """Sampling temperature, resolved: the model's override or the experiment's value (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus-sampling mass in (0, 1], resolved like temperature."""
    max_tokens: int = 64
    """Generated tokens per answer, at most; resolved like temperature."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key itself)."""
    endpoint: str | None = None
    """API base URL for HTTP backends (resolved to the provider's default); None for in-process engines."""
    max_concurrency: int = 8
    """Requests in flight per endpoint (HTTP backends), shared by the model's actor pool."""
    timeout_s: float = 120.0
    """Per-request timeout in seconds; a stream that stalls this long is cut and retried."""
    max_retries: int = 4
    """Retries of 429/5xx responses and cut streams (exponential backoff with jitter)."""
    tensor_parallel_size: int = 1
    """vLLM: GPUs one engine spans; > 1 runs the engine in a placement group of that many GPU bundles."""
    engine_args: dict = field(default_factory=dict)
    """vLLM engine arguments for this model (e.g. max_model_len), recorded verbatim."""
    batch_invariant: bool | None = None
    """vLLM on a GPU: true runs this model's engines with ``VLLM_BATCH_INVARIANT=1`` (set in its engine actors only),
    so a greedy or seeded answer and its log-probs are the same bit for bit at every batch size; needs temperature 0
    or an explicit seed (``grid.batch_invariance``). None or false: off (None is what settings written before the
    key existed read as, so they compare equal)."""
    num_gpus: float | None = None
    """GPUs requested per engine actor (resolved: tensor_parallel_size for vLLM on cuda, 1 for HF on cuda, else 0)."""
    device_map: str | dict | None = None
    """In-process HF engines: accelerate's placement of the layers ("auto", "cpu", or module name → GPU index,
    "cuda:N" or "cpu"; ``grid.device_map``), for a model larger than one GPU; None: the whole model on ``device``."""
    memory_gb: float | None = None
    """Memory (GiB) requested per engine actor, so the scheduler packs big models onto big nodes (None: no request)."""
    min_actors: int | None = None
    """Lower bound of this model's actor pool (resolved: actor_pool_size; None only in hand-built variants)."""
    max_actors: int | None = None
    """Upper bound of this model's actor pool (resolved: actor_pool_size); > min lets the pool autoscale."""
    tokenizer: str | None = None
    """``score`` engines behind an API (backend openai): the served model's tokenizer (local folder, hub id or
    packaged alias), so that token ids are sent; None: the prompt is sent as text and the server tokenizes."""
    score_api: str | None = None
    """``score`` engine of backend openai: "chat" reads log-probs from ``/v1/chat/completions``
    (``actors.http_chat_scorer``); None: ``/v1/completions`` with echo."""
    add_bos: bool | None = None
    """``score`` engines: put the tokenizer's BOS token before every prefix (True), never (False), or as the
    tokenizer's ``add_special_tokens=True`` does (None). Gemma-family models need True."""

    def as_dict(self) -> dict:
        """Plain-JSON form for settings (no secret values: api_key_env is only a variable name)."""
        return asdict(self)

    @classmethod
    def from_settings(cls, entry: dict) -> ModelVariant:
        """The variant a frozen settings entry (any settings format) describes. Keys written by older code are
        missing here and take today's defaults, in this one place; a key this code does not know is refused,
        since running without it could silently change what the entry asked for."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(entry) - known)
        if unknown:
            raise ValueError(f"frozen model settings hold unknown key(s) {', '.join(unknown)}: written by a newer "
                             f"mirrorscan? Run this invocation with the version that made it")
        return cls(**entry)


@dataclass(frozen=True)
class InvocationContext:
    """The invocation an engine's rows belong to, and where its actors report: the same for every model."""

    invocation_id: str
    """UUID of the invocation (``scan_invocations.invocation_id``)."""
    experiment: str
    """Experiment folder name."""
    instrument: str
    """The instrument's registry name (or ``module:Attr`` path), copied into every trace row."""
    envelope_version: str | None = None
    """Version of the instrument's envelope set (``Renderer.envelope_version``), or None."""
    catalog_dsn: str | None = None
    """Catalog DSN the actors write inference_log rows to (None: spilled beside the traces). Never stored."""
    store_uri: str | None = None
    """Trace store URI of the invocation."""
    cache_dir: str | None = None
    """Folder (absolute path) where engines keep caches and temporary files (vLLM's, torch inductor's): the
    driver's ``$MIRRORSCAN_HOME/cache``, which is the same path on the workers (the Ray session gives them the
    driver's home); None: each engine library's own default."""
