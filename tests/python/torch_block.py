"""A small model written for eager torch only (functions, no dtorch import): issue 31's check that
plain torch code runs on dtorch tensors through ``dtorch.Tensor.__torch_function__``."""

import math

import torch
import torch.nn.functional as F


def mlp(x, w1, b1, w2, b2):
    h = F.gelu(torch.add(torch.matmul(x, w1), b1))
    return F.linear(F.silu(h), w2, b2)


def attention(x, wq, wk, wv, mask):
    q, k, v = torch.matmul(x, wq), torch.matmul(x, wk), torch.matmul(x, wv)
    scores = torch.matmul(q, torch.transpose(k, -2, -1)) / math.sqrt(q.shape[-1])
    scores = torch.where(mask, scores, torch.full_like(scores, -1e9))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def block(x, p):
    """x [B, T, D]; p: the weights (wq, wk, wv [D, D], w1 [2D, H], b1 [H], w2 [D, H], b2 [D], mask [T, T])."""
    a = attention(F.layer_norm(x, (x.shape[-1],)), p["wq"], p["wk"], p["wv"], p["mask"])
    h = torch.cat([x, a], dim=-1)
    return torch.tanh(mlp(h, p["w1"], p["b1"], p["w2"], p["b2"])) + x
