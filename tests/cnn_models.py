"""CNNs for the front-door tests and benches/bench_cnn.py: torchvision's resnet18 and
mobilenet_v3_small (weights=None), and a small 1-D audio CNN.

torchvision is used when it imports. The torchvision wheels a CPU-only torch can get from PyPI are
built against CUDA torch: their compiled ops do not load and ``import torchvision`` fails (and with
it every ``import transformers``), so it is not a test dependency. Without it, ``resnet18`` and
``mobilenet_v3_small`` build the same networks here, layer for layer (torchvision's structure, its
initialisation scheme, BatchNorm eps), so the front doors see the same ops.
"""

from __future__ import annotations

import torch
from torch import nn


def torchvision_models():
    """torchvision.models when torchvision imports, else None."""
    try:
        import torchvision.models as models
    except Exception:  # noqa: BLE001  (a CUDA build on CPU torch raises RuntimeError, not ImportError)
        return None
    return models


# -- resnet18 ---------------------------------------------------------------------------------------
class BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                            nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = self.downsample(x) if self.downsample is not None else x
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        widths, layers, c_in = (64, 128, 256, 512), [], 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(c_in, width, stride), BasicBlock(width, width, 1)))
            c_in = width
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512, classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- mobilenet_v3_small ----------------------------------------------------------------------------------
def _divisible(value: float, divisor: int = 8) -> int:
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _conv_bn_act(c_in: int, c_out: int, kernel: int, stride: int, groups: int, act: type | None
                 ) -> nn.Sequential:
    layers = [nn.Conv2d(c_in, c_out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(c_out, eps=0.001, momentum=0.01)]
    if act is not None:
        layers.append(act(inplace=True))
    return nn.Sequential(*layers)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(channels, squeezed, 1), nn.Conv2d(squeezed, channels, 1)
        self.relu, self.gate = nn.ReLU(), nn.Hardsigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(self.fc2(self.relu(self.fc1(self.avgpool(x)))))


class InvertedResidual(nn.Module):
    def __init__(self, c_in: int, kernel: int, expanded: int, c_out: int, se: bool, act: type, stride: int
                 ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        if expanded != c_in:
            layers.append(_conv_bn_act(c_in, expanded, 1, 1, 1, act))
        layers.append(_conv_bn_act(expanded, expanded, kernel, stride, expanded, act))
        if se:
            layers.append(SqueezeExcitation(expanded, _divisible(expanded // 4)))
        layers.append(_conv_bn_act(expanded, c_out, 1, 1, 1, None))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.residual else out


#: (c_in, kernel, expanded, c_out, squeeze-excitation, activation, stride) of mobilenet_v3_small.
SMALL = [(16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2),
         (24, 3, 88, 24, False, nn.ReLU, 1),
         (24, 5, 96, 40, True, nn.Hardswish, 2), (40, 5, 240, 40, True, nn.Hardswish, 1),
         (40, 5, 240, 40, True, nn.Hardswish, 1), (40, 5, 120, 48, True, nn.Hardswish, 1),
         (48, 5, 144, 48, True, nn.Hardswish, 1), (48, 5, 288, 96, True, nn.Hardswish, 2),
         (96, 5, 576, 96, True, nn.Hardswish, 1), (96, 5, 576, 96, True, nn.Hardswish, 1)]


class MobileNetV3Small(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers = [_conv_bn_act(3, 16, 3, 2, 1, nn.Hardswish)] + [InvertedResidual(*cfg) for cfg in SMALL]
        layers.append(_conv_bn_act(96, 576, 1, 1, 1, nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(inplace=True), nn.Dropout(0.2),
                                        nn.Linear(1024, classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# -- a 1-D audio CNN ---------------------------------------------------------------------------------
class AudioCnn(nn.Module):
    """Keyword spotting on raw 16 kHz audio [N, 1, samples]: a strided front end, conv / batch norm /
    pooling blocks (max, average, adaptive), group and instance norm, SiLU / GELU / ReLU6, a channel
    shuffle, a transposed conv and a linear upsample, then global pooling into class logits."""

    def __init__(self, classes: int = 12) -> None:
        super().__init__()
        self.front = nn.Sequential(nn.Conv1d(1, 16, 9, stride=4, padding=4), nn.BatchNorm1d(16), nn.SiLU())
        self.block1 = nn.Sequential(nn.Conv1d(16, 32, 5, padding=2, groups=4), nn.BatchNorm1d(32), nn.ReLU6(),
                                    nn.MaxPool1d(3, 2, 1))
        self.block2 = nn.Sequential(nn.Conv1d(32, 32, 3, padding=2, dilation=2), nn.GroupNorm(4, 32),
                                    nn.GELU(), nn.AvgPool1d(2))
        self.up = nn.ConvTranspose1d(32, 24, 4, stride=2, padding=1)
        self.norm = nn.InstanceNorm1d(24, affine=True)
        self.pool = nn.AdaptiveMaxPool1d(8)
        self.head = nn.Linear(24 * 8, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.block2(self.block1(self.front(x)))
        batch, channels, length = x.shape  # channel shuffle in 4 groups, written out (ONNX has no op)
        x = x.view(batch, 4, channels // 4, length).transpose(1, 2).reshape(batch, channels, length)
        x = self.norm(self.up(x))
        x = nn.functional.interpolate(x, scale_factor=0.5, mode="linear")
        return self.head(torch.flatten(self.pool(x), 1))


def randomize_batch_norms(model: nn.Module, seed: int) -> None:
    """Non-trivial running statistics and affine parameters, so batch norm folding is exercised."""
    generator = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            shape = m.running_mean.shape
            m.running_mean.copy_(torch.rand(shape, generator=generator) * 0.4 - 0.2)
            m.running_var.copy_(torch.rand(shape, generator=generator) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(shape, generator=generator) * 0.5 + 0.75)
            m.bias.data.copy_(torch.rand(shape, generator=generator) * 0.2 - 0.1)


def build(name: str, seed: int = 0) -> nn.Module:
    """One of "resnet18", "mobilenet_v3_small", "audio_cnn", seeded, in eval mode."""
    torch.manual_seed(seed)
    models = torchvision_models()
    if name == "audio_cnn":
        model = AudioCnn()
    elif models is not None:
        model = getattr(models, name)(weights=None)
    else:
        model = {"resnet18": ResNet18, "mobilenet_v3_small": MobileNetV3Small}[name]()
    with torch.no_grad():
        randomize_batch_norms(model, seed)
    return model.eval()
