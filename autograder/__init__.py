"""The course's assignments, one package each: its manifest, notebook source, judge and corpus
(attnkit/engine/registry.py finds them; nothing outside this folder names one)."""
