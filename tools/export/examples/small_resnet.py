"""A small ResNet for 3x32x32 images (CIFAR-sized): the example docs/export.md exports and serves.

`make_model` is what stowage-export calls: it returns the module with its weights loaded. Here the
weights are random (seeded), with batch-norm statistics set as training would leave them; load
your own with `model.load_state_dict(torch.load("weights.pt"))`.
"""
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class SmallResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(Block(16), nn.MaxPool2d(2), Block(16))
        self.head = nn.Linear(16, classes)

    def forward(self, image):
        return self.head(self.blocks(self.stem(image)).mean((2, 3)))


def make_model():
    torch.manual_seed(0)
    model = SmallResNet()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    return model.eval()
