"""A BERT-style encoder with a masked-language-model head (Devlin et al., 2019):
token and learned position embeddings, post-norm encoder layers with
multi-head self-attention through ``scaled_dot_product_attention`` (padding
mask), GELU feed-forward blocks and LayerNorm, and the MLM head (dense, GELU,
LayerNorm, decoder tied to the token embeddings). Sizes are small (2 layers,
hidden 64, 4 heads); the structure is BERT's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._spec import ModelSpec, Tolerances
from .tape import Dropout

__all__ = ["SPEC", "BertMLM"]

VOCAB = 512
HIDDEN = 64
HEADS = 4
LAYERS = 2
FFN = 256
MAX_POS = 64
BATCH = 4
SEQ = 32
PAD, MASK = 0, 1
FIRST_WORD = 4  # ids below are special tokens
DROPOUT = 0.1


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.dropout = Dropout(DROPOUT)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, HIDDEN // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
        # Attention-probability dropout would draw inside the fused op, where
        # a parity run cannot replay it; BERT's other dropouts stay.
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.dropout(self.out(ctx.transpose(1, 2).reshape(b, s, HIDDEN)))


class EncoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = SelfAttention()
        self.norm1 = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.ffn_in = nn.Linear(HIDDEN, FFN)
        self.ffn_out = nn.Linear(FFN, HIDDEN)
        self.dropout = Dropout(DROPOUT)
        self.norm2 = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask))
        return self.norm2(x + self.dropout(self.ffn_out(F.gelu(self.ffn_in(x)))))


class BertMLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, HIDDEN, padding_idx=PAD)
        self.positions = nn.Embedding(MAX_POS, HIDDEN)
        self.embed_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.embed_dropout = Dropout(DROPOUT)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.head_dense = nn.Linear(HIDDEN, HIDDEN)
        self.head_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.decoder_bias = nn.Parameter(torch.zeros(VOCAB))
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        s = input_ids.shape[1]
        positions = torch.arange(s, device=input_ids.device)
        x = self.tokens(input_ids) + self.positions(positions)
        x = self.embed_dropout(self.embed_norm(x))
        mask = attention_mask[:, None, None, :]  # keys a query may attend to
        for layer in self.layers:
            x = layer(x, mask)
        h = self.head_norm(F.gelu(self.head_dense(x), approximate="tanh"))
        return F.linear(h, self.tokens.weight, self.decoder_bias)  # decoder tied to the embeddings


def _build() -> nn.Module:
    return BertMLM()


def _make_batch(seed: int) -> tuple[tuple[Any, ...], Any]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(FIRST_WORD, VOCAB, (BATCH, SEQ), generator=g)
    lengths = torch.randint(SEQ // 2, SEQ + 1, (BATCH,), generator=g)
    lengths[0] = SEQ
    attention_mask = torch.arange(SEQ)[None, :] < lengths[:, None]
    ids = ids.masked_fill(~attention_mask, PAD)
    chosen = (torch.rand(BATCH, SEQ, generator=g) < 0.15) & attention_mask
    chosen[:, 0] = True  # every row predicts at least one token
    target = torch.where(chosen, ids, torch.full_like(ids, -100))
    inputs = ids.masked_fill(chosen, MASK)
    return (inputs, attention_mask), target


def _loss(model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
    logits = model(*inputs)
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), ignore_index=-100)


def _optimizer(params: Iterable[nn.Parameter], device_type: str) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)


SPEC = ModelSpec(
    name="bert_mlm",
    family="transformer",
    description="BERT-style encoder (2 post-norm layers, hidden 64, 4 heads, SDPA with padding "
    "mask, GELU FFN 256) with a tied MLM head, 4x32 tokens, vocabulary 512, masked cross-entropy, "
    "fused AdamW",
    build=_build,
    make_batch=_make_batch,
    loss_fn=_loss,
    make_optimizer=_optimizer,
    amp_dtype=torch.bfloat16,
    tolerances=Tolerances(),
)
