"""Colour-vision deficiency: simulate how a colour (or a screenshot) looks to a dichromat.

About 1 in 12 men have a red–green deficiency. A deuteranope (no working M cones) and a
protanope (no working L cones) see the world through two cone signals instead of three, so any
two colours that differ only along the red–green axis collapse into one. A teaching view that
separates "accepted" from "rejected" by green vs red alone is unreadable to them.

The simulation is Machado, Oliveira & Fernandes, "A Physiologically-based Model for Simulation
of Color Vision Deficiency" (IEEE TVCG 2009), at severity 1.0 (full dichromacy). Their 3 × 3
matrices act on *linear* RGB, so an sRGB colour is linearised (the sRGB transfer curve), mapped,
clipped to the gamut and encoded again.

How different two colours look is measured as CIE ΔE76: the Euclidean distance in CIE L*a*b*
(D65). ΔE ≈ 2 is a just-noticeable difference side by side; ΔE ≥ 20 is a difference one names
("dark blue" vs "orange") even for small patches across a room — the bar the KV view's palette
has to clear under both simulations (tests/test_kv_html.py).

A minimal PNG reader and writer (numpy + zlib; 8-bit RGB/RGBA, non-interlaced, which is what
Chromium's screenshots are) lets a browser test save the simulated rendering of a screenshot
without an imaging library.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

# Machado et al. 2009, Table 1, severity 1.0; rows map linear (R, G, B) to simulated linear R, G, B.
MACHADO: dict[str, np.ndarray] = {
    "deuteranopia": np.array(
        [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]]
    ),
    "protanopia": np.array(
        [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]]
    ),
}
DEFICIENCIES: tuple[str, ...] = tuple(MACHADO)

# sRGB (linear) -> CIE XYZ, D65 white.
_RGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
_WHITE = _RGB_TO_XYZ @ np.ones(3)


def hex_to_rgb(color: str) -> np.ndarray:
    """'#rrggbb' -> sRGB floats in 0..1."""
    h = color.lstrip("#")
    return np.array([int(h[i : i + 2], 16) for i in (0, 2, 4)], dtype=float) / 255.0


def rgb_to_hex(rgb: np.ndarray) -> str:
    r, g, b = (int(round(float(c) * 255)) for c in np.clip(rgb, 0, 1))
    return f"#{r:02x}{g:02x}{b:02x}"


def to_linear(srgb: np.ndarray) -> np.ndarray:
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def to_srgb(linear: np.ndarray) -> np.ndarray:
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, linear * 12.92, 1.055 * linear ** (1 / 2.4) - 0.055)


def simulate_rgb(srgb: np.ndarray, deficiency: str) -> np.ndarray:
    """Simulated sRGB (floats 0..1) of any array whose last axis is (R, G, B) in 0..1."""
    return to_srgb(to_linear(srgb) @ MACHADO[deficiency].T)


def simulate(color: str, deficiency: str) -> str:
    """'#rrggbb' as a dichromat with `deficiency` sees it."""
    return rgb_to_hex(simulate_rgb(hex_to_rgb(color), deficiency))


def simulate_image(pixels: np.ndarray, deficiency: str) -> np.ndarray:
    """An 8-bit [H, W, 3|4] image as the dichromat sees it (alpha kept as is)."""
    out = pixels.copy()
    out[..., :3] = np.round(simulate_rgb(pixels[..., :3] / 255.0, deficiency) * 255).astype(np.uint8)
    return out


def lab(color: str) -> np.ndarray:
    """CIE L*a*b* (D65) of '#rrggbb'."""
    xyz = _RGB_TO_XYZ @ to_linear(hex_to_rgb(color)) / _WHITE
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str) -> float:
    """CIE ΔE76 between two '#rrggbb' colours."""
    return float(np.linalg.norm(lab(a) - lab(b)))


def worst_pair(colors: dict[str, str], deficiency: str | None = None) -> tuple[float, str, str]:
    """The least distinguishable pair of named colours (as seen with `deficiency`, or normally):
    (ΔE76, name, name)."""
    seen = {k: simulate(v, deficiency) if deficiency else v for k, v in colors.items()}
    names = list(seen)
    return min(
        (delta_e(seen[a], seen[b]), a, b) for i, a in enumerate(names) for b in names[i + 1 :]
    )


# ---- PNG: just enough to read a browser screenshot and write an image back ----------------------

_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {2: 3, 6: 4}  # colour type -> samples per pixel (RGB, RGBA)


def read_png(path: str | Path) -> np.ndarray:
    """An 8-bit, non-interlaced RGB or RGBA PNG as a uint8 array [H, W, 3|4]."""
    data = Path(path).read_bytes()
    if not data.startswith(_SIGNATURE):
        raise ValueError(f"{path}: not a PNG file")
    pos, idat, header = len(_SIGNATURE), [], None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length  # length, type, body, crc
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError(f"{path}: no IHDR chunk")
    width, height, depth, color_type, _, _, interlace = header
    if depth != 8 or color_type not in _CHANNELS or interlace:
        raise ValueError(f"{path}: only 8-bit non-interlaced RGB/RGBA PNGs are supported")
    bpp = _CHANNELS[color_type]
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8).reshape(height, 1 + width * bpp)
    return _unfilter(raw, bpp).reshape(height, width, bpp)


def _unfilter(raw: np.ndarray, bpp: int) -> np.ndarray:
    """Undo PNG's per-scanline filters (None, Sub, Up, Average, Paeth; RFC 2083 §6)."""
    height, stride = raw.shape[0], raw.shape[1] - 1
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int64)
        if kind == 0:
            row = line
        elif kind == 2:
            row = (line + prev) % 256
        elif kind == 1:  # Sub: a running sum per channel, vectorised with cumsum
            row = np.cumsum(line.reshape(-1, bpp), axis=0).reshape(-1) % 256
        else:  # Average and Paeth depend on the reconstructed left byte: a plain loop
            row = _unfilter_sequential(kind, line.tolist(), prev.tolist(), bpp)
        out[y] = row
        prev = np.asarray(row, dtype=np.int64)
    return out


def _unfilter_sequential(kind: int, line: list[int], prev: list[int], bpp: int) -> np.ndarray:
    row = [0] * len(line)
    for i, x in enumerate(line):
        a = row[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            row[i] = (x + (a + b) // 2) & 0xFF
        else:
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            row[i] = (x + pred) & 0xFF
    return np.array(row, dtype=np.int64)


def write_png(path: str | Path, pixels: np.ndarray) -> None:
    """Write a uint8 [H, W, 3|4] array as an 8-bit RGB/RGBA PNG (filter None on every line)."""
    height, width, channels = pixels.shape
    color_type = {3: 2, 4: 6}[channels]
    raw = np.concatenate([np.zeros((height, 1), np.uint8), pixels.reshape(height, -1).astype(np.uint8)], axis=1)

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    Path(path).write_bytes(
        _SIGNATURE + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b"")
    )
