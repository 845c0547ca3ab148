"""A small model for CLI tests: two linear layers with a ReLU (two matmul tasks)."""
import torch


class SmallMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.fc2 = torch.nn.Linear(128, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make():
    torch.manual_seed(0)
    return SmallMLP().eval(), (torch.randn(32, 64),)


class Head(torch.nn.Module):
    """Shares its first layer's dispatch (64 -> 128 + ReLU on 32 rows) with SmallMLP."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 128)
        self.out = torch.nn.Linear(128, 10)

    def forward(self, x):
        return self.out(torch.relu(self.fc1(x)))


def make_head():
    torch.manual_seed(1)
    return Head().eval(), (torch.randn(32, 64),)
