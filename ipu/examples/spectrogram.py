"""A spectrogram on the IPU: the short-time Fourier transform of a chirp (jax.scipy.signal.stft),
its magnitude in decibels, and the frequency of the strongest bin in each frame.

complex64 values are held as pairs of float32 on the IPU; the model plans each FFT as a tiled FFT
runs (a DFT on the multiply units, then butterfly stages across the tiles) and prints its plan.
On cpu the same program runs on plain JAX for comparison."""

from __future__ import annotations

import argparse

import _common
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy import signal


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    _common.add_common_args(parser)
    parser.add_argument("--samples", type=int, default=65536, help="length of the signal")
    parser.add_argument("--rate", type=float, default=16000.0, help="samples a second (Hz)")
    parser.add_argument("--nperseg", type=int, default=512, help="samples a frame (a power of "
                        "two suits the FFT best)")
    return parser.parse_args(argv)


def chirp(samples: int, rate: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A linear chirp from 5% to 40% of the sample rate, with a little noise, and its frequency
    at each sample."""
    t = np.arange(samples) / rate
    start, end = 0.05 * rate, 0.40 * rate
    sweep = (end - start) / t[-1]
    phase = 2 * np.pi * (start * t + sweep * t**2 / 2)
    noise = np.random.default_rng(seed).normal(scale=0.1, size=samples)
    return (np.sin(phase) + noise).astype(np.float32), start + sweep * t


def spectrogram(x: jax.Array, rate: float, nperseg: int) -> tuple[jax.Array, jax.Array]:
    """(power in dB of each frequency bin and frame, the strongest bin of each frame)."""
    _, _, frames = signal.stft(x, fs=rate, nperseg=nperseg)
    power = jnp.abs(frames) ** 2
    decibels = 10 * jnp.log10(power + 1e-12)
    return decibels, jnp.argmax(power, axis=0)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = _common.device_for(args.platform)
    host, truth = chirp(args.samples, args.rate, args.seed)
    x = jax.device_put(host, device)

    step = jax.jit(spectrogram, static_argnums=(1, 2))
    compiled = step.lower(x, args.rate, args.nperseg).compile()
    decibels, peaks = compiled(x)
    decibels, peaks = np.asarray(decibels), np.asarray(peaks)
    bins, frames = decibels.shape
    hop = args.nperseg // 2  # stft's default overlap: half a frame
    bin_hz = args.rate / args.nperseg
    # The first and last frames are half zeros (stft pads the ends): they are left out.
    inner = np.arange(1, frames - 1)
    error = np.abs(peaks[inner] * bin_hz - truth[np.minimum(inner * hop, args.samples - 1)])
    print(f"spectrogram: {bins} frequency bins x {frames} frames of {args.nperseg} samples "
          f"({bin_hz:.1f} Hz a bin), complex64 on {x.devices()}")
    print(f"  strongest bin against the chirp's frequency: mean error {error.mean():.1f} Hz, "
          f"largest {error.max():.1f} Hz")

    view = _common.model_view(compiled, device, "the spectrogram", args.plot)
    if view is not None:
        import jax_ipu

        for row in jax_ipu.report(compiled).ops:
            if row.kind == "fft":
                print(f"  FFT {row.shapes}: {row.cycles:,.0f} cycles (compute "
                      f"{row.compute_cycles:,.0f}, exchange {row.exchange_cycles:,.0f}, sync "
                      f"{row.sync_cycles:,.0f}), {row.flops / 1e6:.2f} MFLOP on {row.tiles} "
                      f"tiles\n    plan: {row.plan}\n    runner-up: {row.runner_up or 'none'}")
    if args.plot:
        plt = _common.pyplot()
        fig, ax = plt.subplots(figsize=(7, 4))
        seconds = args.samples / args.rate
        ax.imshow(decibels, origin="lower", aspect="auto", cmap="magma",
                  extent=(0, seconds, 0, args.rate / 2), vmin=decibels.max() - 80)
        ax.plot(np.arange(args.samples) / args.rate, truth, "c--", linewidth=0.8,
                label="chirp frequency")
        ax.set(title=f"Spectrogram on {args.platform}", xlabel="seconds", ylabel="Hz")
        ax.legend(loc="upper left")
        _common.save_figure(fig, args.plot, "spectrogram.png")

    _common.summary(
        "spectrogram",
        platform=args.platform,
        bins=bins,
        frames=frames,
        mean_error_hz=float(error.mean()),
        bin_hz=bin_hz,
        total_db=float(decibels.sum()),
        model_us=view["seconds"] * 1e6 if view else 0.0,
    )


if __name__ == "__main__":
    main()
