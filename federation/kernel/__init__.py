"""The shared kernel: what the federation server and the member agent both mean by a job and a cluster.

Resources and their canonical units (`resources`), a pod's GPU ask (`gpuask`), DRA claims and their devices
(`dra`), a gang's minimum and what its pods hold (`gangs`), durations as users write them (`durations`), the
job-spec names both sides read (`jobspec`) and a tier's free room (`tiers`). Both sides import from here; neither
imports the other's modules, so either can change without the other noticing, and this package changes only
when the contract does.
"""
