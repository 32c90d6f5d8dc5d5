"""The random-input models' objectives: Ψ-statistics, kernel expectations under q(x) (`psi`),
the Bayesian GP-LVM's collapsed bound (`gplvm`), the GP state-space model's variational bound
(`gpssm`), the Kalman filter of its linear-Gaussian part (`kalman`) and particle Gibbs for its
approximating process (`particle_gibbs`)."""
