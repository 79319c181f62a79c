"""A process that answers two cells on a vLLM sampler and exits without shutting it down, as an engine
actor does when its pool ends (``test_vllm_sampler``): what the process prints on the way out is the test."""

import sys


def main(model_dir: str) -> None:
    from test_vllm_sampler import RUN, cells, variant

    from mirrorscan.actors.vllm_sampler import VLLMSampler

    rows = VLLMSampler(variant(), model_dir, RUN)(cells().slice(0, 2))
    print(f"answered {rows.num_rows}", flush=True)


if __name__ == "__main__":   # vLLM's engine core starts by spawn, which imports this module again
    main(sys.argv[1])
