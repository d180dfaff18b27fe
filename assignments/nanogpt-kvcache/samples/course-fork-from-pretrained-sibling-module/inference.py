"""The fork's cache helper, a module of its own beside model.py (model.py imports it): each layer's keys and values
so far, grown by one step's at a time."""

import torch


class KVCache:
    """Keys and values per layer, each (B, nh, T_so_far, hs), and how many positions they hold."""

    def __init__(self, n_layer):
        self.keys = [None] * n_layer
        self.values = [None] * n_layer

    @property
    def length(self):
        return 0 if self.keys[0] is None else self.keys[0].size(2)

    def extend(self, layer, k, v):
        """This step's keys and values appended to the layer's; returns all of them."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v
