"""CUDA-L1 rows (the training data's reader, workshop.training.cuda_l1) become labelled pairs."""

from __future__ import annotations

from workshop.training import cuda_l1


def test_cuda_l1_rows_become_pairs_both_ways_with_sizes() -> None:
    reference = (
        "import torch\nclass Model:\n    pass\nbatch_size = 16\nheight, width = 2 * 64, 1 << 7\n\n"
        "def get_inputs():\n    return [torch.randn(batch_size, height, width, dtype=torch.float16)]\n"
    )
    row = {
        "level_id": 1,
        "task_id": 9,
        "ref_code": reference,
        "custom_code": "x = load_inline(name='k', cuda_sources='')",
        "score_default": 2.0,
        "cuda_graph_code": "torch.cuda.CUDAGraph()",
        "score_cuda_graph": 0.8,
        "cudnn_code": "",
        "score_cudnn": 1.1,
    }
    pairs = list(cuda_l1.pairs_of_row(row, "l40"))
    assert len(pairs) == 4  # custom and graph, each both ways; no cuDNN code
    forward, backward = pairs[0], pairs[1]
    assert forward.speedup == 2.0 and backward.speedup == 0.5 and forward.op == backward.op == "L1/T9"
    assert forward.request.candidate.language == "cuda" and forward.request.reference.language == "pytorch"
    assert forward.request.problem == {"batch_size": 16, "height": 128, "width": 128, "dtype": "f16"}
    assert forward.request.hardware["key"] == "L40" and forward.group != backward.group
