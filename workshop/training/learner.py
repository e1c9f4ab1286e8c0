"""The learner behind models/embedded/backend.py: an ensemble of per-side MLPs trained on pairs with torch.

Only pairs are measured, so each member learns a side's log time up to a constant: the
loss sees log2 t̂_ref − log2 t̂_cand against the measured s (Gaussian NLL, with the spread
from both sides' learned sd). Exported to the numpy arrays TimeModel runs, and tested
to agree with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from kernelcast.models.embedded.backend import TimeModel
from kernelcast.models.embedded.features import FEATURE_NAMES, FLOOR_INDEX
from workshop.training import CLIP_LOG2


@dataclass(frozen=True)
class Settings:
    """How to train; the defaults made the shipped weights (stored in their meta)."""

    members: int = 5
    hidden: int = 256
    epochs: int = 40
    batch: int = 256
    learning_rate: float = 2e-3
    weight_decay: float = 1e-3
    dropout: float = 0.1
    # Width of the pair-level correction (0: none): an antisymmetric term h(ref, cand) − h(cand, ref)
    # for what depends on the two sides together (the same family with another tile, say).
    pair_hidden: int = 128
    # Each member trains on a bootstrap of whole operations rather than of pairs, so the
    # members disagree most where an unseen operation would surprise them.
    op_bootstrap: bool = False
    # "cuda" trains on a GPU (fast experiments on the device machine); shipped weights are
    # trained on "cpu", where a seed reproduces them bit for bit.
    device: str = "cpu"


class _Ensemble(nn.Module):
    """All members as stacked weights (member first), trained at once: one forward per batch, not one per member."""

    def __init__(self, members: int, features: int, hidden: int, dropout: float, pair_hidden: int = 0) -> None:
        super().__init__()

        def layer(fan_in: int, fan_out: int) -> tuple[nn.Parameter, nn.Parameter]:
            bound = 1.0 / fan_in**0.5  # nn.Linear's default initialisation
            weight = torch.empty(members, fan_in, fan_out).uniform_(-bound, bound)
            bias = torch.empty(members, 1, fan_out).uniform_(-bound, bound)
            return nn.Parameter(weight), nn.Parameter(bias)

        self.w1, self.b1 = layer(features, hidden)
        self.w2, self.b2 = layer(hidden, hidden)
        self.w3, self.b3 = layer(hidden, 2)
        self.alpha = nn.Parameter(torch.ones(members))
        self.log_sigma0 = nn.Parameter(torch.full((members,), -1.0))
        self.dropout = nn.Dropout(dropout)
        self.pair = None
        if pair_hidden:
            self.pair = nn.ParameterList([*layer(2 * features, pair_hidden), *layer(pair_hidden, pair_hidden), *layer(pair_hidden, 1)])

    def _pair_term(self, z: torch.Tensor) -> torch.Tensor:
        assert self.pair is not None
        w1, b1, w2, b2, w3, b3 = self.pair
        members, batch = z.shape[:2]

        def h(x: torch.Tensor) -> torch.Tensor:
            x = self.dropout(nn.functional.silu(torch.bmm(x, w1) + b1))
            x = self.dropout(nn.functional.silu(torch.bmm(x, w2) + b2))
            return (torch.bmm(x, w3) + b3)[..., 0]

        return h(z.reshape(members, batch, -1)) - h(z.flip(2).reshape(members, batch, -1))

    def forward(self, z: torch.Tensor, floors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """z: (M, B, 2, F) standardised sides; floors: (M, B, 2) raw floors → (M, B) mean and sd of s."""
        members, batch = z.shape[:2]
        h = self.dropout(nn.functional.silu(torch.bmm(z.reshape(members, 2 * batch, -1), self.w1) + self.b1))
        h = self.dropout(nn.functional.silu(torch.bmm(h, self.w2) + self.b2))
        out = (torch.bmm(h, self.w3) + self.b3).reshape(members, batch, 2, 2)
        time = self.alpha[:, None, None] * floors + out[..., 0]
        sd = nn.functional.softplus(out[..., 1])
        variance = torch.exp(2 * self.log_sigma0)[:, None] + (sd**2).sum(dim=-1)
        mean = time[..., 0] - time[..., 1]
        if self.pair is not None:
            mean = mean + self._pair_term(z)
        return mean, variance.sqrt()


def _standardisation(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = features.reshape(-1, features.shape[-1])
    mu, sd = rows.mean(axis=0), rows.std(axis=0)
    return mu, np.where(sd > 1e-6, sd, 1.0)


def _member_weights(weight: torch.Tensor, groups: np.ndarray | None, settings: Settings, generator: torch.Generator) -> torch.Tensor:
    """(members, N) sampling weights: the pairs' weights, times how often each member drew the pair's operation."""
    rows = weight.expand(settings.members, -1)
    if not settings.op_bootstrap or groups is None:
        return rows
    _, index = np.unique(groups, return_inverse=True)
    ops = int(index.max()) + 1
    draws = torch.randint(0, ops, (settings.members, ops), generator=generator)
    counts = torch.zeros(settings.members, ops, dtype=torch.float64).scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))
    return rows * counts[:, torch.as_tensor(index)]


def _fit(
    z: torch.Tensor,
    floors: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    groups: np.ndarray | None,
    settings: Settings,
    seed: int,
) -> _Ensemble:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    member_weights = _member_weights(weight, groups, settings, generator)
    ensemble = _Ensemble(settings.members, z.shape[-1], settings.hidden, settings.dropout, settings.pair_hidden).to(z.device)
    optimiser = torch.optim.AdamW(ensemble.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    steps_per_epoch = max(1, -(-len(z) // settings.batch))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, settings.learning_rate, total_steps=settings.epochs * steps_per_epoch)
    ensemble.train()
    for _ in range(settings.epochs):
        # Each member draws its own weighted bootstrap of the pairs: the ensemble's spread
        # then says how much the data pins the answer down.
        order = torch.multinomial(member_weights, len(z), replacement=True, generator=generator)
        for start in range(0, len(z), settings.batch):
            index = order[:, start : start + settings.batch].to(z.device)
            mean, sd = ensemble(z[index], floors[index])
            loss = (torch.log(sd) + 0.5 * ((target[index] - mean) / sd) ** 2).mean()
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
    ensemble.eval()
    return ensemble


def train(
    features: np.ndarray,
    log2_speedups: np.ndarray,
    weights: np.ndarray,
    settings: Settings,
    seed: int,
    meta: dict[str, Any],
    groups: np.ndarray | None = None,
) -> TimeModel:
    """An ensemble fitted to (N, 2, F) pair features and measured log2 S; deterministic given `seed`.

    `groups`: each pair's operation, for Settings.op_bootstrap.
    """
    mu, sd = _standardisation(features)
    z = torch.tensor((features - mu) / sd, dtype=torch.float32, device=settings.device)
    floors = torch.tensor(features[..., FLOOR_INDEX], dtype=torch.float32, device=settings.device)
    target = torch.tensor(np.clip(log2_speedups, -CLIP_LOG2, CLIP_LOG2), dtype=torch.float32, device=settings.device)
    weight = torch.tensor(weights / weights.sum(), dtype=torch.float64)
    # One thread: on a shared 2-core machine torch's spinning worker threads cost more than they give.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ensemble = _fit(z, floors, target, weight, groups, settings, seed)
    finally:
        torch.set_num_threads(threads)
    arrays = export(ensemble, mu, sd)
    return TimeModel(arrays, {**meta, "features": list(FEATURE_NAMES), "seed": seed, "settings": settings.__dict__})


def export(ensemble: _Ensemble, mu: np.ndarray, sd: np.ndarray) -> dict[str, np.ndarray]:
    """The numpy arrays TimeModel runs (biases without the broadcast axis)."""

    def array(value: torch.Tensor) -> np.ndarray:
        return value.detach().cpu().numpy().astype(np.float64)

    pair = {}
    if ensemble.pair is not None:
        w1, b1, w2, b2, w3, b3 = ensemble.pair
        pair = {"p1": array(w1), "pb1": array(b1[:, 0]), "p2": array(w2), "pb2": array(b2[:, 0]), "p3": array(w3), "pb3": array(b3[:, 0])}
    return {
        **pair,
        "mu": mu,
        "sd": sd,
        "w1": array(ensemble.w1),
        "b1": array(ensemble.b1[:, 0]),
        "w2": array(ensemble.w2),
        "b2": array(ensemble.b2[:, 0]),
        "w3": array(ensemble.w3),
        "b3": array(ensemble.b3[:, 0]),
        "alpha": array(ensemble.alpha),
        "sigma0": array(torch.exp(ensemble.log_sigma0)),
    }
