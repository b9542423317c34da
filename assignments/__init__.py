"""The course's assignments, one package each: its manifest, notebook source, judge and corpus
(autograder/registry.py finds them; nothing outside this folder names one)."""
