"""Reproducible experiments and the demo: user entry points, no maths. One package or module
per paper or study (`bauer2016`, `bui2017`, `vdw2018`, `randominputs`, `approximations`,
`additive`, `streaming`, `likelihoods`, `demo`); what they share (the data folder and loaders,
metrics, sections, the command line, tables, figures) is written once in `shared`. No
experiment imports another."""
