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


class GeluMlp(torch.nn.Module):
    """64 -> 96, GELU, -> 32: the GELU body reads outer constants, so its dispatch takes the
    structural matcher (not the DAG one). The dynamic-shape tests import it with `?` rows."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 96)
        self.fc2 = torch.nn.Linear(96, 32)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


class SmallConv(torch.nn.Module):
    """A 3x3 conv + ReLU in NCHW (one conv task; IREE's aarch64 default for it is far from
    the NEON peak, so the llvm-mca proxy ranks tuned programs above it)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


def make_conv():
    torch.manual_seed(2)
    return SmallConv().eval(), (torch.randn(1, 16, 14, 14),)
