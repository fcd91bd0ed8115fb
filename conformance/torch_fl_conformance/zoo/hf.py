"""Hugging Face ``transformers`` architectures a device must run like the CPU.

Five families, each a tiny configuration with random weights built from its
``*Config`` (nothing is downloaded: ``HF_HUB_OFFLINE=1`` is set before
``transformers`` is imported, and no ``from_pretrained`` is ever called):

- ``gpt2``: a causal LM whose output projection is its token embedding (tied);
- ``bert``: an encoder masked LM whose decoder is tied to its word embeddings;
- ``t5``: an encoder-decoder with one embedding shared by both stacks and the head;
- ``vit``: a vision transformer classifying 16x16 images;
- ``llama``: a decoder-only causal LM as today's LLMs are built: grouped-query
  attention (4 query heads sharing 2 key/value heads), rotary position
  embeddings, RMSNorm and a SiLU-gated MLP, untied head, a padded batch.

Every dropout probability of the configs is 0, so a training step is the same
computation on both sides. ``transformers`` is optional: this module imports
without it, and ``unavailable()`` says why it cannot be used.

``check_model(name, device)`` is what the L2 area (suite/L2/test_hf.py)
certifies, for one model built under ``torch.manual_seed(0)`` and a deep copy
of it moved with ``.to(device)``:

- **tied_weights**: parameters that are one ``Parameter`` on the CPU are still
  one after ``.to(device)``;
- **forward**: eval-mode logits and loss of one batch against the CPU's;
- **train_step**: one SGD step (momentum 0.9, the optimizer built after
  ``.to()`` as Hugging Face's trainers do): the loss, every parameter's
  gradient and every parameter after the step;
- **generate** (causal LMs): greedy ``generate()`` of ``NEW_TOKENS`` tokens
  from the CPU-trained model, copied to the device, picks the CPU's tokens;
- **no_fallback**: no operator of the training loop (the move, the forward,
  the step) ran on the CPU fallback or failed (``torch_fl.op_stats_scope``).
  Generation is counted apart (``generate_fallback_ops``) and reported, not
  judged: its stopping criteria are host bookkeeping (``isin`` on the EOS ids,
  integer arithmetic on lengths) that a device is not asked to run natively.

Numbers are compared with the suite's tolerances (``tolerances.compare``)
under the model-level class of ``tolerances.toml`` that ``hf.<name>`` falls in.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import torch
from torch import nn

from torch_fl_conformance import kernel_watch, tolerances

from .parity import _first_line, _not_native, _op_scope

__all__ = [
    "CHECKS",
    "LR",
    "MIN_GREEDY_GAP",
    "MODELS",
    "NEW_TOKENS",
    "PROMPT",
    "HFModel",
    "HFResult",
    "build",
    "check_model",
    "checks_of",
    "generate",
    "greedy_gap",
    "make_optimizer",
    "tied_groups",
    "train_step",
    "transformers",
    "unavailable",
]

LR = 0.02
PROMPT = ((5, 17, 33, 2), (40, 41, 42, 43))  # token ids, batch of two
NEW_TOKENS = 4  # greedy tokens the area compares
MIN_GREEDY_GAP = 1e-4  # CPU top-2 logit gap below which a greedy choice is a near tie
CHECKS = ("tied_weights", "forward", "train_step", "generate", "no_fallback")


@functools.cache
def transformers() -> ModuleType:
    """transformers, imported only once nothing can make it reach the network."""
    for switch in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
        os.environ[switch] = "1"
    module = importlib.import_module("transformers")
    module.logging.set_verbosity_error()
    return module


@functools.cache
def unavailable() -> str | None:
    """Why transformers cannot be used here; None when it can."""
    try:
        transformers()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not available"
        return f"transformers is not importable: {type(exc).__name__}: {_first_line(exc)}"
    return None


# ---------------------------------------------------------------------------
# the models and their batches
# ---------------------------------------------------------------------------


def _gpt2() -> nn.Module:
    config = transformers().GPT2Config(
        vocab_size=97, n_positions=32, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return transformers().GPT2LMHeadModel(config)


def _gpt2_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 97, (2, 12), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "labels": ids}


def _bert() -> nn.Module:
    config = transformers().BertConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return transformers().BertForMaskedLM(config)


def _bert_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 99, (2, 12), generator=torch.Generator().manual_seed(2))
    masked = torch.tensor([1, 4, 7])
    labels = torch.full_like(ids, -100)
    labels[:, masked] = ids[:, masked]
    ids[:, masked] = 4  # the [MASK] id of this vocabulary
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 9:] = 0  # padding in the second sequence
    return {"input_ids": ids, "attention_mask": attention_mask, "labels": labels}


def _t5() -> nn.Module:
    config = transformers().T5Config(
        vocab_size=99, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=2, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    return transformers().T5ForConditionalGeneration(config)


def _t5_batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(2, 99, (2, 10), generator=generator)
    attention_mask = torch.ones_like(ids)
    attention_mask[0, 8:] = 0
    labels = torch.randint(2, 99, (2, 6), generator=generator)
    return {"input_ids": ids, "attention_mask": attention_mask, "labels": labels}


def _vit() -> nn.Module:
    config = transformers().ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=5,
    )  # fmt: skip
    return transformers().ViTForImageClassification(config)


def _vit_batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(4)
    return {
        "pixel_values": torch.randn(2, 3, 16, 16, generator=generator),
        "labels": torch.randint(0, 5, (2,), generator=generator),
    }


def _llama() -> nn.Module:
    config = transformers().LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        attention_dropout=0.0, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )  # fmt: skip
    return transformers().LlamaForCausalLM(config)


def _llama_batch() -> dict[str, torch.Tensor]:
    ids = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(5))
    attention_mask = torch.ones_like(ids)
    attention_mask[1, 9:] = 0  # padding at the end of the second sequence
    return {"input_ids": ids, "attention_mask": attention_mask,
            "labels": ids.masked_fill(attention_mask == 0, -100)}


@dataclass(frozen=True)
class HFModel:
    """One architecture: ``build()`` (random weights, deterministic under
    ``torch.manual_seed``) and ``batch()`` (CPU tensors, labels included: the
    model's output has a ``.loss``)."""

    name: str
    description: str
    build: Callable[[], nn.Module]
    batch: Callable[[], dict[str, torch.Tensor]]
    ties_weights: bool  # whether the architecture shares a Parameter between modules
    generates: bool  # a causal LM: greedy generate() is compared

    @property
    def tolerance_key(self) -> str:
        """The name tolerances.toml knows this model's results by."""
        return f"hf.{self.name}"


MODELS: dict[str, HFModel] = {
    "gpt2": HFModel("gpt2", "GPT-2 causal LM, output projection tied to the token embedding",
                    _gpt2, _gpt2_batch, ties_weights=True, generates=True),
    "bert": HFModel("bert", "BERT masked LM, decoder tied to the word embeddings",
                    _bert, _bert_batch, ties_weights=True, generates=False),
    "t5": HFModel("t5", "T5 encoder-decoder, one embedding shared by encoder, decoder and head",
                  _t5, _t5_batch, ties_weights=True, generates=False),
    "vit": HFModel("vit", "ViT image classifier", _vit, _vit_batch,
                   ties_weights=False, generates=False),
    "llama": HFModel("llama", "Llama causal LM: grouped-query attention (4 query heads over 2 "
                     "key/value heads), rotary positions, RMSNorm, SiLU-gated MLP",
                     _llama, _llama_batch, ties_weights=False, generates=True),
}


def checks_of(spec: HFModel) -> tuple[str, ...]:
    """The checks that apply to a model (tying only where it ties, generation
    only for causal LMs)."""
    skip = {"tied_weights"} if not spec.ties_weights else set()
    if not spec.generates:
        skip.add("generate")
    return tuple(c for c in CHECKS if c not in skip)


def build(name: str) -> nn.Module:
    """MODELS[name] under torch.manual_seed(0), in train mode; the global RNG is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return MODELS[name].build().train()


def tied_groups(model: nn.Module) -> list[list[str]]:
    """Names of the parameters that are one Parameter object, per object shared."""
    by_object: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_object.setdefault(id(p), []).append(name)
    return [names for names in by_object.values() if len(names) > 1]


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


def train_step(model: nn.Module, batch: dict[str, torch.Tensor],
               optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """One step; the gradients stay on the parameters until the next one."""
    optimizer.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    return loss.detach()


def generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int) -> Any:
    """Greedy generation with the scores of every step (model in eval mode)."""
    with torch.no_grad():
        return model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
            do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0,
        )  # fmt: skip


def greedy_gap(scores: tuple[torch.Tensor, ...]) -> float:
    """The smallest top-2 logit gap over the steps of a generation."""
    return min(float(torch.topk(s, 2, dim=-1).values.diff(dim=-1).abs().min()) for s in scores)


# ---------------------------------------------------------------------------
# the check the L2 area certifies
# ---------------------------------------------------------------------------


@dataclass
class HFResult:
    model: str
    device: str
    # check -> unmet expectations, actual and allowed values each (empty: it holds)
    failures: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CHECKS})
    tied_groups: list[list[str]] = field(default_factory=list)  # on the CPU
    forward_max_abs: float = 0.0
    loss_cpu: float | None = None
    loss_device: float | None = None
    grad_max_abs: float = 0.0
    param_max_abs: float = 0.0
    tokens_cpu: list[list[int]] | None = None
    tokens_device: list[list[int]] | None = None
    fallback_ops: list[str] = field(default_factory=list)  # "aten::op (dtype)", training loop
    generate_fallback_ops: list[str] = field(default_factory=list)  # reported, not judged
    # the training loop's ATen ops by how they ran (kernel_watch.kernels_of), for the
    # report's suspect kernels
    kernels: dict[str, list[str]] = field(default_factory=dict)
    complete: bool = False  # the training loop ran to its end

    def to_dict(self) -> dict[str, Any]:
        """Everything but the kernels (a failing test records those apart)."""
        d = dataclasses.asdict(self)
        del d["kernels"]
        return d


def _compare(label: str, device: torch.Tensor, cpu: torch.Tensor, kind: str,
             spec: HFModel) -> tuple[list[str], float]:
    bad, max_abs, _ = tolerances.compare([device.detach().cpu()], [cpu.detach()], kind,
                                         spec.tolerance_key)
    return [f"{label}: {m.message}" for m in bad], max_abs


# The phases of the training loop, in order, and what each one is called in a failure.
_PHASES = {
    "tied_weights": "moving the model with .to()",
    "forward": "the eval forward",
    "train_step": "the training step",
}
_LOOP = tuple(_PHASES)


def check_model(name: str, device: str) -> HFResult:
    """Runs MODELS[name] on `device` and on the CPU; see the module doc."""
    spec = MODELS[name]
    dev = torch.device(device)
    res = HFResult(name, str(dev))
    fail = res.failures
    cpu = build(name)
    res.tied_groups = tied_groups(cpu)
    if bool(res.tied_groups) != spec.ties_weights:
        raise RuntimeError(f"{name}: tied parameter groups on the CPU {res.tied_groups}; the "
                           f"area expects {'some' if spec.ties_weights else 'none'}")
    initial = copy.deepcopy(cpu)
    batch = spec.batch()
    prompt = torch.tensor(PROMPT)

    # The CPU reference, first: an error here is the area's, never the device's.
    cpu.eval()
    with torch.no_grad():
        ref = cpu(**batch)
    cpu.train()
    ref_loss = train_step(cpu, batch, make_optimizer(cpu))
    res.loss_cpu = float(ref_loss)
    ref_gen, gap = None, 0.0
    if spec.generates:
        cpu.eval()
        ref_gen = generate(cpu, prompt, NEW_TOKENS)
        gap = greedy_gap(ref_gen.scores)
        if gap <= MIN_GREEDY_GAP:
            raise RuntimeError(f"{name}: the CPU's greedy choice is a near tie (top-2 logit "
                               f"gap {gap:.2e}); the area needs another prompt")
        res.tokens_cpu = ref_gen.sequences.tolist()

    phase = "tied_weights"
    with _op_scope() as scope:
        try:
            model = initial.to(dev)
            params = dict(model.named_parameters(remove_duplicate=False))
            for names in res.tied_groups:
                n = len({id(params[p]) for p in names})
                if n != 1:
                    fail["tied_weights"].append(
                        f"{' / '.join(names)} are one Parameter on the CPU, {n} after .to('{dev}')")
            batch_dev = {k: v.to(dev) for k, v in batch.items()}

            phase = "forward"
            model.eval()
            with torch.no_grad():
                out = model(**batch_dev)
            for label, d, c in (("logits", out.logits, ref.logits), ("loss", out.loss, ref.loss)):
                msgs, err = _compare(label, d, c, "output", spec)
                fail["forward"] += msgs
                res.forward_max_abs = max(res.forward_max_abs, err)

            phase = "train_step"
            model.train()
            loss = train_step(model, batch_dev, make_optimizer(model))
            res.loss_device = float(loss)
            fail["train_step"] += _compare("loss", loss, ref_loss, "output", spec)[0]
            trained = dict(model.named_parameters())
            for pname, p in cpu.named_parameters():
                q = trained.get(pname)
                if q is None:
                    fail["train_step"].append(f"parameter {pname}: missing on {dev}")
                    continue
                if q.grad is None:
                    fail["train_step"].append(f"grad {pname}: none on {dev}, the CPU has one")
                else:
                    msgs, err = _compare(f"grad {pname}", q.grad, p.grad, "grad", spec)
                    fail["train_step"] += msgs
                    res.grad_max_abs = max(res.grad_max_abs, err)
                msgs, err = _compare(f"{pname} after the step", q, p, "output", spec)
                fail["train_step"] += msgs
                res.param_max_abs = max(res.param_max_abs, err)

            res.complete = True
        except Exception as exc:  # noqa: BLE001 - a device error fails the checks it cut short
            why = f"{_PHASES[phase]} raised {type(exc).__name__}: {_first_line(exc)}"
            for check in _LOOP[_LOOP.index(phase):]:
                fail[check].append(why)
            fail["no_fallback"].append(f"not measured to the end: {why}")
    res.fallback_ops = _not_native(scope)
    if scope is not None:
        res.kernels = kernel_watch.kernels_of(scope.table)
    if res.fallback_ops:
        fail["no_fallback"].append(
            f"operators not native in {name}'s training loop: {', '.join(res.fallback_ops)}")

    if ref_gen is not None:  # from the CPU's trained weights: independent of the loop above
        with _op_scope() as scope:
            try:
                out = generate(copy.deepcopy(cpu).to(dev), prompt.to(dev), NEW_TOKENS)
                res.tokens_device = out.sequences.cpu().tolist()
                if res.tokens_device != res.tokens_cpu:
                    fail["generate"].append(
                        f"greedy tokens on {dev} {res.tokens_device}, on the CPU "
                        f"{res.tokens_cpu} (the CPU's top-2 logits are at least {gap:.2e} apart)")
            except Exception as exc:  # noqa: BLE001
                fail["generate"].append(f"generate() raised {type(exc).__name__}: "
                                        f"{_first_line(exc)}")
        res.generate_fallback_ops = _not_native(scope)
    return res
