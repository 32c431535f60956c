"""Colour-vision deficiency: simulate how a colour (or a screenshot) looks to a dichromat.

About 1 in 12 men have a red–green deficiency. A deuteranope (no working M cones) and a
protanope (no working L cones) see the world through two cone signals instead of three, so any
two colours that differ only along the red–green axis collapse into one. A teaching view that
separates "accepted" from "rejected" by green vs red alone is unreadable to them.

The simulation is Machado, Oliveira & Fernandes, "A Physiologically-based Model for Simulation
of Color Vision Deficiency" (IEEE TVCG 2009), at severity 100 (full dichromacy), as colorspacious
implements it (`sRGB1+CVD`: linearise sRGB, apply the Machado matrix, encode again); the result
is clipped to the gamut.

How different two colours look is measured as CIE ΔE76: the Euclidean distance in CIE L*a*b*
(D65), colorspacious's `deltaE` in `CIELab`. ΔE ≈ 2 is a just-noticeable difference side by
side; ΔE ≥ 20 is a difference one names ("dark blue" vs "orange") even for small patches across a
room — the bar the KV view's palette has to clear under both simulations (tests/test_kv_html.py).

Screenshots are read and written with Pillow (it ships with Streamlit): a browser test saves the
simulated rendering of a screenshot next to it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from colorspacious import cspace_convert, deltaE
from PIL import Image, UnidentifiedImageError

# colorspacious names the Machado model by its anomalous trichromacy; severity 100 is the dichromacy.
_CVD_TYPES = {"deuteranopia": "deuteranomaly", "protanopia": "protanomaly"}
DEFICIENCIES: tuple[str, ...] = tuple(_CVD_TYPES)


def hex_to_rgb(color: str) -> np.ndarray:
    """'#rrggbb' -> sRGB floats in 0..1."""
    h = color.lstrip("#")
    return np.array([int(h[i : i + 2], 16) for i in (0, 2, 4)], dtype=float) / 255.0


def rgb_to_hex(rgb: np.ndarray) -> str:
    r, g, b = (int(round(float(c) * 255)) for c in np.clip(rgb, 0, 1))
    return f"#{r:02x}{g:02x}{b:02x}"


def simulate_rgb(srgb: np.ndarray, deficiency: str) -> np.ndarray:
    """Simulated sRGB (floats 0..1) of any array whose last axis is (R, G, B) in 0..1."""
    space = {"name": "sRGB1+CVD", "cvd_type": _CVD_TYPES[deficiency], "severity": 100}
    return np.clip(cspace_convert(np.asarray(srgb, dtype=float), space, "sRGB1"), 0.0, 1.0)


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
    return np.asarray(cspace_convert(hex_to_rgb(color), "sRGB1", "CIELab"))


def delta_e(a: str, b: str) -> float:
    """CIE ΔE76 between two '#rrggbb' colours."""
    return float(deltaE(hex_to_rgb(a), hex_to_rgb(b), input_space="sRGB1", uniform_space="CIELab"))


def worst_pair(colors: dict[str, str], deficiency: str | None = None) -> tuple[float, str, str]:
    """The least distinguishable pair of named colours (as seen with `deficiency`, or normally):
    (ΔE76, name, name)."""
    seen = {k: simulate(v, deficiency) if deficiency else v for k, v in colors.items()}
    names = list(seen)
    return min(
        (delta_e(seen[a], seen[b]), a, b) for i, a in enumerate(names) for b in names[i + 1 :]
    )


def read_png(path: str | Path) -> np.ndarray:
    """An 8-bit RGB or RGBA PNG as a uint8 array [H, W, 3|4] (other modes are converted to RGB)."""
    try:
        with Image.open(path) as img:
            if img.format != "PNG":
                raise ValueError(f"{path}: not a PNG file")
            return np.asarray(img if img.mode in ("RGB", "RGBA") else img.convert("RGB")).copy()
    except UnidentifiedImageError as exc:
        raise ValueError(f"{path}: not a PNG file") from exc


def write_png(path: str | Path, pixels: np.ndarray) -> None:
    """Write a uint8 [H, W, 3|4] array as an 8-bit RGB/RGBA PNG."""
    Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8)).save(path, format="PNG")
