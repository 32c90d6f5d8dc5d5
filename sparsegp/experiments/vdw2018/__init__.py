"""van der Wilk (2018), "Sparse Gaussian process approximations and applications": the
inter-domain experiment (`sparsegp experiment vdw2018-interdomain`, `interdomain`) and the
convolutional GPs (`sparsegp experiment vdw2018-conv`, `conv`)."""
