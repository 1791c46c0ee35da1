"""verl's own tests of its log-prob / entropy helpers (volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7),
run against our kernels through ``_logprob_shims`` with verl's references, tolerances and
assertions unchanged (verl itself is not installed: its reference functions, a few lines of torch,
are re-expressed here as verl writes them). Our adaptation, not its source:

- ``tests/utils/test_linear_cross_entropy.py`` (``TestLinearCrossEntropy.verify_correctness``):
  ``linear_cross_entropy`` against ``run_torch_entropy`` and verl's original path
  (``entropy_from_logits`` + ``logprobs_from_logits``) at temperature 1.5, bf16 inputs in
  U(-0.5, 0.5), upstream gradients in bf16; the kernel's tolerances (log-probs atol 1e-3 rtol 2e-4,
  entropy 5e-3 / 5e-4, gradients 2e-2 / 4e-2). CPU: T 37, H 64, V 515 in the interpreter (bf16
  handed to the kernel as exact fp32); ``gpu``: verl's five (T, H, V) cases.
- ``logprobs_from_logits_naive`` (``verl/utils/torch_functional.py``; the reference of
  ``tests/models/test_engine.py`` and of the script in verl commit 6a6e52ce4): ``token_logprobs``
  against it with the 1e-4 / 1e-4 tolerance verl's test holds its own log-prob paths to.
- ``tests/special_distributed/test_tensor_dict.py::test_vocab_parallel_entropy``: the entropy of
  a vocabulary split evenly over 2 tensor-parallel ranks (a gloo group of 2 CPU processes, not
  Megatron's mpu) against ``entropy_from_logits`` on the whole logits, forward and backward, with
  ``torch.testing.assert_close``'s default tolerances as verl uses them. Its shape (2 x 128 rows,
  V 155136) needs 2 GPUs and is not run here; CPU: 2 x 8 rows, V 1034.

Skipped: verl's timing and peak-memory parts (``check_storage_all``, latencies: measurements, not
assertions) and the comparisons among verl's own implementations (``FusedLinearForPPO`` vs its
original path), which do not involve our kernels.
"""

from __future__ import annotations

import pytest
import torch
from _logprob_shims import verl_linear_cross_entropy, verl_vocab_parallel_entropy_worker

from polytrace_kernels.logprob import token_logprobs

device = "cuda" if torch.cuda.is_available() else "cpu"


def entropy_from_logits(logits):  # verl.utils.torch_functional.entropy_from_logits
    pd = torch.nn.functional.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def logprobs_from_logits_naive(logits, labels):  # verl.utils.torch_functional.logprobs_from_logits_naive
    logp = torch.nn.functional.log_softmax(logits, dim=-1)
    return torch.gather(logp, -1, labels.unsqueeze(-1)).squeeze(-1)


def run_torch_entropy(hidden, weight, labels, temperature, reduction="none"):
    hidden = hidden.squeeze(0).to(torch.float32)
    weight = weight.transpose(0, 1).to(torch.float32)
    logits = torch.matmul(hidden, weight)
    logits /= temperature
    pd = torch.nn.functional.softmax(logits, dim=-1)
    entropy = torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)
    logprobs = torch.neg(torch.nn.functional.cross_entropy(logits, labels.squeeze(0), reduction=reduction))
    return logprobs, entropy


def run_verl_original_entropy(hidden, weight, labels, temperature):
    hidden = hidden.squeeze(0).to(torch.float32)
    weight = weight.transpose(0, 1).to(torch.float32)
    logits = torch.matmul(hidden, weight)
    logits /= temperature
    return logprobs_from_logits_naive(logits, labels.squeeze(0)), entropy_from_logits(logits)


VERL_CASES = [(1, 37, 64, 515)] + [pytest.param(*c, marks=pytest.mark.gpu) for c in
                                    [(1, 1937, 3584, 152064), (1, 2169, 896, 151936), (1, 1530, 2048, 32256),
                                     (1, 1388, 4096, 102400), (1, 8192, 4096, 102400)]]


@pytest.mark.parametrize("batch_size, num_tokens, hidden_size, vocab_size", VERL_CASES)
def test_linear_cross_entropy(batch_size, num_tokens, hidden_size, vocab_size):
    torch.manual_seed(0)
    temperature, dtype = 1.5, torch.bfloat16
    hidden = torch.empty((batch_size, num_tokens, hidden_size), dtype=dtype, device=device).uniform_(-0.5, 0.5)
    hidden.requires_grad_()
    weight = torch.empty((vocab_size, hidden_size), dtype=dtype, device=device).uniform_(-0.5, 0.5).requires_grad_()
    labels = torch.randint(0, vocab_size, (batch_size, num_tokens), device=device)
    torch_logprobs, torch_entropy = run_torch_entropy(hidden, weight, labels, temperature)
    verl_logprobs, verl_entropy = run_verl_original_entropy(hidden, weight, labels, temperature)
    kernel_logprobs, kernel_entropy = verl_linear_cross_entropy(hidden, weight, labels, temperature)
    torch.testing.assert_close(torch_logprobs, kernel_logprobs, atol=1e-3, rtol=2e-4)
    torch.testing.assert_close(torch_entropy, kernel_entropy, atol=5e-3, rtol=5e-4)
    torch.testing.assert_close(verl_logprobs, kernel_logprobs, atol=1e-3, rtol=2e-4)
    torch.testing.assert_close(verl_entropy, kernel_entropy, atol=5e-3, rtol=5e-4)

    g_entropy = torch.empty((num_tokens,), dtype=dtype, device=device).uniform_(-0.5, 0.5)
    g_logprobs = torch.empty((num_tokens,), dtype=dtype, device=device).uniform_(-1, 1)
    grads = {}
    for name, (lp, ent) in {"torch": (torch_logprobs, torch_entropy), "verl": (verl_logprobs, verl_entropy),
                            "kernel": (kernel_logprobs, kernel_entropy)}.items():
        grads[name] = torch.autograd.grad((ent, lp), (hidden, weight), (g_entropy, g_logprobs), retain_graph=False)
    for ref in ("torch", "verl"):
        torch.testing.assert_close(grads[ref][0], grads["kernel"][0], atol=2e-2, rtol=4e-2)
        torch.testing.assert_close(grads[ref][1], grads["kernel"][1], atol=2e-2, rtol=4e-2)


@pytest.mark.parametrize("batch_size, seq_len, vocab_size", [(2, 16, 4096),
                                                             pytest.param(16, 1024, 32768, marks=pytest.mark.gpu)])
def test_logprobs_from_logits_naive(batch_size, seq_len, vocab_size):
    torch.manual_seed(42)
    logits = torch.randn(batch_size, seq_len, vocab_size, device=device, dtype=torch.float32)
    input_ids = torch.randint(0, vocab_size, (batch_size, seq_len), device=device)
    naive = logprobs_from_logits_naive(logits, input_ids)
    ours = token_logprobs(logits.reshape(-1, vocab_size), input_ids.reshape(-1)).view_as(input_ids)
    torch.testing.assert_close(naive, ours, atol=1e-4, rtol=1e-4)


def test_vocab_parallel_entropy(tmp_path):
    import torch.multiprocessing as mp

    torch.manual_seed(0)
    batch_size, seqlen, vocab_size = 2, 8, 1034
    logits = torch.randn(batch_size * seqlen, vocab_size, requires_grad=True)
    target = torch.randint(low=0, high=vocab_size, size=(batch_size * seqlen,), dtype=torch.int64)
    grad_output = torch.randn(batch_size * seqlen)
    case = {"logits": logits.detach(), "target": target, "grad_output": grad_output}
    mp.spawn(verl_vocab_parallel_entropy_worker, args=(2, str(tmp_path / "init"), case, str(tmp_path)), nprocs=2,
             join=True)
    target_entropy = entropy_from_logits(logits)
    target_entropy.backward(grad_output)
    per = vocab_size // 2
    for tp_rank in range(2):
        out = torch.load(tmp_path / f"rank{tp_rank}.pt")
        torch.testing.assert_close(out["entropy"], target_entropy.detach())
        torch.testing.assert_close(logits.grad[:, tp_rank * per:(tp_rank + 1) * per], out["grad"])
        torch.testing.assert_close(logits.detach()[:, tp_rank * per:(tp_rank + 1) * per], out["local"])
