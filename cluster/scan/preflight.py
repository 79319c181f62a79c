"""What ``scan`` checks and resolves before anything is written: engines for the instrument's kind and the
packages they need, overrides that would change nothing, and where the store is.

Every problem is a ConfigError naming the file, the field and the fix (exit 2), raised before the
invocation is recorded, so a refused config leaves no catalog row and no file behind.
"""

from __future__ import annotations

import os

from mirrorscan.cluster.home import default_store_uri
from mirrorscan.grid.errors import ConfigError, shorten
from mirrorscan.grid.spec import API_BACKENDS, Spec


def check_engines(spec: Spec) -> None:
    """ConfigError unless every model's backend has an engine of the kind the instrument asks for, and this
    Python can import the optional packages that engine needs (its ``requires``, ``actors.engine``): the error
    names the model, the missing package and the extra that installs it (``pip install 'mirrorscan[gpu]'``).

    Whether a package is there is asked of ``importlib.util.find_spec`` only (vLLM is not imported to tell). It is
    asked in the driver's Python: a local Ray's engine actors run in it, and a cluster's nodes install the same
    extras as its head (cluster.yaml's setup_commands, the KubeRay image), so an engine would fail the same way
    in its actor, after the invocation had been recorded."""
    from mirrorscan.actors.registry import check_engine, engine_class

    kind = spec.instrument.engine_kind
    for i, m in enumerate(spec.models):
        check_engine(kind, m.backend, spec.config_path, f"models[{i}].backend")
        for need in engine_class(m.backend, kind).missing():
            raise ConfigError(spec.config_path, f"models[{i}].backend", f"{m.label}'s {kind} engine (backend "
                              f"{m.backend!r}) needs {need.package}, and module {need.module!r} is not installed "
                              "in this Python", f"install it with {need.install_hint(m)}")


def check_context(spec: Spec, model_sources: dict[str, str]) -> None:
    """ConfigError when a local model's ``max_tokens`` leaves no room in its context window (config.json:
    ``cluster.models.resolve.context_length``), which holds the prompt and the answer together."""
    from mirrorscan.cluster.models.resolve import context_length

    for i, m in enumerate(spec.models):
        if m.backend in API_BACKENDS or m.label not in model_sources:   # a dry run knows no unconverted demo model
            continue
        context = context_length(model_sources[m.label])
        if context is not None and m.max_tokens >= context:
            field = f"models[{i}].max_tokens" if "max_tokens" in spec.raw["models"][i] else "max_tokens"
            raise ConfigError(spec.config_path, field, f"is {m.max_tokens}, but {m.model}'s context window holds "
                              f"{context} tokens, prompt included", f"use fewer than {context}")


def check_template_overrides(spec: Spec, *, prepare: bool = True) -> None:
    """ConfigError when an in-process model's (hf, vllm) effort or chat-template kwarg leaves its rendered
    prompt byte-identical (``actors.chat.unapplied_overrides`` on a probe conversation): it would be recorded
    as applied while it changes nothing. Loads only tokenizers, one per model source, and only for models
    that set such an override (transformers is imported only then). ``prepare=False`` (a dry run) skips a
    packaged model that is not converted yet instead of converting it."""
    from mirrorscan.actors.chat import template_kwargs, unapplied_overrides
    from mirrorscan.cluster.models.demo import demo_model_dir
    from mirrorscan.cluster.models.resolve import DEMO_MODEL_ALIAS, resolve_model_source

    tokenizers: dict[str, object] = {}
    for i, m in enumerate(spec.models):
        if m.backend in API_BACKENDS or (m.effort is None and not template_kwargs(m, with_effort=False)):
            continue
        field = f"models[{i}].model"
        if not prepare and m.model == DEMO_MODEL_ALIAS and not (demo_model_dir() / "config.json").is_file():
            continue
        source = resolve_model_source(m.model, spec.config_path, field)
        if source not in tokenizers:
            from transformers import AutoTokenizer

            try:
                tokenizers[source] = AutoTokenizer.from_pretrained(source)
            except (OSError, ValueError) as exc:
                raise ConfigError(spec.config_path, field, f"no tokenizer loads from {source} "
                                  f"({shorten(' '.join(str(exc).split()), 200)})",
                                  "point the model at a folder or hub id with a tokenizer") from None
        try:
            unapplied = unapplied_overrides(tokenizers[source], m)
        except Exception as exc:   # the template fails with every override in place
            raise ConfigError(spec.config_path, field, f"{m.model}'s chat template fails with this entry's effort and "
                              f"chat-template kwargs ({type(exc).__name__}: {' '.join(str(exc).split())})",
                              "fix or remove them, or use a model whose template takes them") from None
        if unapplied:
            also = f" (nor do: {', '.join(unapplied[1:])})" if unapplied[1:] else ""
            raise ConfigError(spec.config_path, f"models[{i}].{unapplied[0]}",
                              f"changes nothing in {m.model}'s chat template{also}",
                              "remove it, or use a model whose chat template reads it")


def check_empty_prefixes(spec: Spec, model_sources: dict[str, str], cells=None) -> None:
    """ConfigError when a ``score`` instrument's model cannot score as configured: a forced BOS
    (``models[].add_bos`` true) that the tokenizer lacks or that is a chat-template token; or items whose
    prefix is empty (the instrument's ``empty_prefix_items(spec)`` → (file, field paths)) for
    a model that puts no BOS first (its tokenizer's rule, or ``add_bos`` false): the first target token would
    have no position to be scored at. Names the items and the models. ``cells``: the first stage's cells when
    they do not come from the item files (a reproduction from the stored coordinates): their rendered
    prefixes are checked instead, named by probe id."""
    if spec.instrument.engine_kind != "score":
        return
    from transformers import AutoTokenizer

    from mirrorscan.actors.score_tokens import ScoreTokenError, adds_bos, score_ids

    if cells is not None:
        rendered = spec.instrument.render(cells, spec.instrument_spec)
        file, items = spec.config_path, sorted({p for p, prefix in zip(rendered.column("probe_id").to_pylist(),
                                                                          rendered.column("prefix").to_pylist())
                                                if prefix == ""})
    else:
        file, items = spec.instrument.empty_prefix_items(spec.instrument_spec)
    tokenizers: dict[str, object] = {}
    lacking = []
    for i, m in enumerate(spec.models):
        if m.backend in API_BACKENDS and m.tokenizer:   # ids are sent: the named tokenizer is the one that counts
            from mirrorscan.cluster.models.resolve import resolve_model_source

            source = resolve_model_source(m.tokenizer, spec.config_path, f"models[{i}].tokenizer")
        elif m.backend in API_BACKENDS or (m.add_bos is None and not items):
            continue
        else:
            source = model_sources[m.label]
        if source not in tokenizers:
            tokenizers[source] = AutoTokenizer.from_pretrained(source)
        tok = tokenizers[source]
        if m.add_bos:
            try:
                score_ids(tok, "a", " b", True)
            except ScoreTokenError as exc:
                raise ConfigError(spec.config_path, f"models[{i}].add_bos", f"is true, but for {m.label}: {exc}",
                                  "remove add_bos to follow the tokenizer, or set it to false") from None
        if not (adds_bos(tok) if m.add_bos is None else m.add_bos):
            lacking.append(f"models[{i}] ({m.label})")
    if items and lacking:
        more = f" and {len(items) - 1} more" if len(items) > 1 else ""
        raise ConfigError(file, items[0] + more, f"begins with the blank, and {', '.join(lacking)} puts no BOS "
                          "token first, so the first target token has no position to be scored at",
                          "put words before the blank, or score with models that put BOS first (add_bos: true "
                          "where the tokenizer has a BOS token)")


def resolve_store(flag: str | None, spec: Spec) -> str:
    """The store URI: flag, then config, then $MIRRORSCAN_STORE, then the home store (absolute for local)."""
    uri = flag or spec.store or os.environ.get("MIRRORSCAN_STORE") or default_store_uri()
    return uri if "://" in uri else os.path.abspath(uri)

