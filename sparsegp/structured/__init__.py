"""Structured kernel matrices on regular grids (KISS-GP / SKI; Wilson & Nickisch 2015):
cubic interpolation weights, Toeplitz and Kronecker products, iterative solves."""
