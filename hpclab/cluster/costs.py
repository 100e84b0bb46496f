"""What a run costs: time to train from a measured rate, GPU-hours and money (chapter 07, section 9).

Mao 2015's arithmetic, before any job is submitted: AlexNet on one K40 processes 20 iterations
(5120 images) in 26.5 s, so 90 epochs of ImageNet's 1.2 M training images take
1.2e6 x 90 / 5120 x 26.5 s = 559 000 s, about 155 hours (the deck rounds to 160): a week of one
GPU. The same arithmetic prices a run: a cluster or cloud bills GPU-hours (GPUs x wall hours),
and a data-parallel run on g GPUs at scaling efficiency e takes hours_1 / (g x e) wall hours
on g GPUs, i.e. hours_1 / e GPU-hours: more GPUs shorten the wait, never the bill (at best
they leave it unchanged; lost efficiency is paid). Nakayama 2017 tells the other half: a
forgotten GPU job bills its hours too.
"""

from __future__ import annotations

# Mao 2015: AlexNet (Caffe) on one NVIDIA K40; ImageNet-1k's training set, 90 epochs.
MAO2015 = {"sample_images": 5120, "sample_seconds": 26.5, "dataset_images": 1.2e6, "epochs": 90}

# A stated, dated price: on-demand H100 SXM 80GB, USD per GPU-hour (the range of the specialty
# GPU clouds; hyperscalers 3.50-5.00, long-tail providers 1.99-2.50), as published in May 2026.
PRICE = {
    "gpu": "H100 SXM 80GB",
    "usd_per_gpu_hour": 2.50,
    "range": "2.50-3.50 (specialty clouds), 3.50-5.00 (hyperscalers), on demand",
    "source": "Mercatus, 'Cloud GPU pricing' (https://www.mercatus-ai.com/blog/cloud-gpu-pricing)",
    "as_of": "May 2026",
}


def train_hours(
    dataset_images: float, epochs: float, sample_images: float, sample_seconds: float
) -> float:
    """Hours to see ``dataset_images`` x ``epochs`` images at the measured rate
    ``sample_images`` per ``sample_seconds``."""
    return dataset_images * epochs / (sample_images / sample_seconds) / 3600


def run_cost_usd(
    hours_one_gpu: float, gpus: int, efficiency: float, usd_per_gpu_hour: float
) -> float:
    """The bill of a run that takes ``hours_one_gpu`` on one GPU, spread over ``gpus`` GPUs at
    scaling ``efficiency``: wall hours x GPUs x price."""
    wall = hours_one_gpu / (gpus * efficiency)
    return wall * gpus * usd_per_gpu_hour
