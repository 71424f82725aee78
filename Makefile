# fairbench: the two set-up commands are `make run` and `make test`; both install what is
# missing first (a .venv in the repo root, torch's local CPU build before anything else).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CONFIG ?= default
WORKERS ?=
# SCHEDULER=tcp://host:8786: the trials of the run, tune and fig-* targets run on the Dask
# cluster there (docs/guide.md, "Running on a Dask cluster"); results land here as usual
SCHEDULER ?=
EXECUTOR_FLAGS = $(if $(WORKERS),--workers $(WORKERS))$(if $(SCHEDULER), --executor dask --scheduler $(SCHEDULER))

# Real data: $FAIRBENCH_DATA if set, else ../shared/datasets when it exists.
FAIRBENCH_DATA ?= $(abspath $(wildcard ../shared/datasets))
ifneq ($(FAIRBENCH_DATA),)
export FAIRBENCH_DATA
endif

.PHONY: install run test test-fast lint bench bench-figure audit report clean figures fig-adult-dp fig-adult-eo fig-adult-fnr \
	fig-credit-parkinsons table-step-time \
	table-datasets fig-multigroup fig-acs fig-dp-fermi fig-dpse tune-adult-dp

# One BLAS/OpenMP thread per process wherever processes run one per core (pytest -n auto, the
# tune workers): multi-threaded OpenBLAS oversubscribes the cores (fairlearn's logistic fits
# on Adult took 2.1 s instead of 0.035 s; the fairlearn test ran 83 s instead of 12 s).
SINGLE_THREADED := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the local CPU build first, so the project's torch requirement pulls no CUDA wheels
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

run: install
	$(BIN)/fairbench run $(CONFIG) $(EXECUTOR_FLAGS)

test: install
	$(SINGLE_THREADED) $(BIN)/python -m pytest -q -n auto

# The suite without the tests marked slow (over ~10 s each): a quick check while editing.
test-fast: install
	$(SINGLE_THREADED) $(BIN)/python -m pytest -q -n auto -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: install
	$(BIN)/fairbench bench --fits

# The full Adult demographic-parity figure (all methods, 3 epsilons, 10 seeds) timed from
# scratch in a temporary directory, with each method's share: writes fig-adult-dp_time.json.
# DEVICE=cuda: its trials on the GPU (up to 256 a stack), with the GPU's utilisation, into
# table-step-time/cuda/.
bench-figure: install
	$(BIN)/fairbench bench --figure fig-adult-dp --out results/figures/table-step-time$(if $(DEVICE),/$(DEVICE)) $(if $(WORKERS),--workers $(WORKERS)) $(if $(DEVICE),--device $(DEVICE))

# Canary audits (fairbench audit): a white-box adversary sees every gradient release of 10
# runs with 1000 canaries each. DP-SGD, RaCO-DP, DP-FERMI and CGOO at claimed epsilon 1, each
# correct (must not be flagged) and broken two ways (a third of the noise, clipping skipped:
# must be flagged, else the target fails). About 10 minutes on 2 cores; writes
# results/audit/*.json and the target's wall seconds to results/audit/wall_seconds.txt.
AUDIT := $(BIN)/fairbench audit --epsilon 1 --trials 10 --canaries 1000 --json
define audit-method
	$(AUDIT) --method $(1) $(2) > results/audit/$(1)-eps1.json
	$(AUDIT) --method $(1) $(2) --broken one-third-noise > results/audit/$(1)-broken-one-third-noise-eps1.json
	$(AUDIT) --method $(1) $(2) --broken no-clipping > results/audit/$(1)-broken-no-clipping-eps1.json
endef
audit: install
	rm -rf results/audit && mkdir -p results/audit
	date +%s > results/audit/.start
	$(call audit-method,dp-sgd,)
	$(call audit-method,raco-dp,--knob 0.05)
	$(call audit-method,dp-fermi,--knob 1)
	$(call audit-method,cgoo,--knob 0.05)
	echo $$(( $$(date +%s) - $$(cat results/audit/.start) )) > results/audit/wall_seconds.txt
	rm results/audit/.start

report: install
	$(BIN)/fairbench report runs/$(CONFIG)

# Equal-draws tuning (fairbench tune) on Adult at epsilon 1: results/tune/adult-dp/tuning.md,
# the selected run configs in selected/, and their fresh-seed runs in final/.
tune-adult-dp: install
	$(BIN)/fairbench tune tune-adult-dp --out results/tune/adult-dp --charge-tuning $(EXECUTOR_FLAGS)

# A tune's wall time (seconds since the recipe's `start`), written once: a resume, which
# skips finished trials, would overwrite the run from scratch with its own seconds. Delete the
# tune directory (or the file) to measure again.
first_wall = { [ -e $(1) ] || echo $$(( $$(date +%s) - start )) > $(1); }

# fig-privacy-cost (issue 16): equal-draws tuning of every method per dataset (fairbench tune;
# re-running resumes, skipping finished trials) into results/tune/privacy-cost/<name>/, then
# per dataset a CSV, a figure per model and a note in results/figures/fig-privacy-cost/; after
# each tune, `fairbench tune-budgets` re-selects from its first 4 and 8 draws (the notes' budget
# sensitivity table, the stable label of each winner).
# `make privacy-cost-<name>` tunes one dataset alone and writes the wall seconds of that
# invocation to its wall_seconds.txt, once (`first_wall`).
# The committed figure (issue 40: regenerated under the paper-region spaces, 16 draws x 3
# search seeds, eps {0.1, 1, 8}; the other datasets' configs are shipped, about 6 h more on 2
# cores): `make fig-privacy-cost PRIVACY_COST="$(PRIVACY_COST_ALL)"` runs them all.
PRIVACY_COST_ALL := german adult2k adult5k adult5k-mlp compas parkinsons credit adult heart
PRIVACY_COST ?= german compas parkinsons
# every dataset's tuning is a target (`make privacy-cost-credit`); the figure builds PRIVACY_COST
PRIVACY_COST_TUNES := $(addprefix privacy-cost-,$(PRIVACY_COST_ALL))
.PHONY: fig-privacy-cost $(PRIVACY_COST_TUNES)

fig-privacy-cost: $(addprefix privacy-cost-,$(PRIVACY_COST))
	$(BIN)/fairbench figure privacy-cost $(addprefix results/tune/privacy-cost/,$(PRIVACY_COST)) --out results/figures/fig-privacy-cost

$(PRIVACY_COST_TUNES): privacy-cost-%: install
	@mkdir -p results/tune/privacy-cost/$*
	start=$$(date +%s); \
	$(SINGLE_THREADED) $(BIN)/fairbench tune privacy-cost-$* --out results/tune/privacy-cost/$* $(EXECUTOR_FLAGS) && \
	$(SINGLE_THREADED) $(BIN)/fairbench tune-budgets results/tune/privacy-cost/$* && \
	$(call first_wall,results/tune/privacy-cost/$*/wall_seconds.txt)

# fig-tuning-cost (issue 24): what paying for tuning costs. Per dataset two tune outputs with
# the same candidates, counts, seeds and splits: tuning paid for by private selection at the
# stated total epsilon (tuning-cost-<name>-paid.yaml) and its uncharged twin
# (tuning-cost-<name>-free.yaml); then per dataset and epsilon the released models' test error
# and ranking under each, in results/figures/fig-tuning-cost. Re-running resumes (the paid
# arms recalibrate first, about 6 minutes each: `fairbench figure tuning-cost` redraws alone).
# The committed figure is German's, COMPAS's and Parkinsons' (51 minutes from scratch on 2
# cores); Adult n = 5,000's config is shipped:
# `make fig-tuning-cost TUNING_COST="german compas parkinsons adult5k"`.
TUNING_COST ?= german compas parkinsons
TUNING_COST_TUNES := $(foreach d,$(TUNING_COST),tuning-cost-$(d)-free tuning-cost-$(d)-paid)
.PHONY: fig-tuning-cost $(TUNING_COST_TUNES)
fig-tuning-cost: $(TUNING_COST_TUNES)
	$(BIN)/fairbench figure tuning-cost $(addprefix results/tune/tuning-cost/,$(subst tuning-cost-,,$(TUNING_COST_TUNES))) --out results/figures/fig-tuning-cost

$(TUNING_COST_TUNES): tuning-cost-%: install
	@mkdir -p results/tune/tuning-cost/$*
	start=$$(date +%s); \
	$(SINGLE_THREADED) $(BIN)/fairbench tune tuning-cost-$* --out results/tune/tuning-cost/$* $(EXECUTOR_FLAGS) && \
	$(call first_wall,results/tune/tuning-cost/$*/wall_seconds.txt)

# fig-literature (issue 23): the baselines the seed papers claim to beat (Jagielski et al.,
# PF-LD, the DP-ERM mitigation) beside RaCO-DP and DP-FERMI, tuned with equal draws in both
# privacy notions: equalized odds (literature.yaml) and demographic parity
# (literature-adult-dp.yaml) on Adult at eps 1, DP-FERMI's published setting (issue 40's
# committed grid; Credit and eps 0.5/3/9 are one line of each config away, ~3 h more on 2
# cores), each followed by `fairbench tune-budgets`. Re-running resumes. Then the
# figures, dominance and budget-sensitivity tables and the published Adult points against ours
# in results/figures/fig-literature.
LITERATURE := literature literature-adult-dp
.PHONY: fig-literature $(addprefix tune-,$(LITERATURE))
fig-literature: $(addprefix tune-,$(LITERATURE))
	$(BIN)/fairbench figure literature $(addprefix results/tune/,$(LITERATURE)) --out results/figures/fig-literature

$(addprefix tune-,$(LITERATURE)): tune-%: install
	@mkdir -p results/tune/$*
	start=$$(date +%s); \
	$(SINGLE_THREADED) $(BIN)/fairbench tune $* --out results/tune/$* $(EXECUTOR_FLAGS) && \
	$(SINGLE_THREADED) $(BIN)/fairbench tune-budgets results/tune/$* && \
	$(call first_wall,results/tune/$*/wall_seconds.txt)

# fig-disparate-impact (issue 39): the group accuracy cost of privacy. One run (Adult by sex
# and by race, COMPAS by sex, Law School white/black; eps 0.5-8; erm, dp-sgd, dpsgd-f,
# dpsgd-global-adapt, raco-dp, dp-fermi; 5 seeds) into run/, then the per-group drops, the
# minority's drop paired against DP-SGD and the figures beside it. Re-running resumes.
.PHONY: fig-disparate-impact
fig-disparate-impact: install
	$(SINGLE_THREADED) $(BIN)/fairbench run fig-disparate-impact --out results/figures/fig-disparate-impact/run $(EXECUTOR_FLAGS)
	$(BIN)/fairbench figure disparate-impact results/figures/fig-disparate-impact/run --out results/figures/fig-disparate-impact

# Does the tune give RaCO-DP its best shot? (issue 40) Its paper configuration (its space's draw
# 0) run on the final seeds of the committed Parkinsons and Adult tunes at eps 1, paired by seed
# with the tuned selections at every target: results/figures/raco-dp-paper-default/comparison.md.
.PHONY: raco-dp-paper-default
raco-dp-paper-default: install
	$(SINGLE_THREADED) $(BIN)/fairbench run raco-dp-paper-default --out results/figures/raco-dp-paper-default/run $(EXECUTOR_FLAGS)
	$(BIN)/fairbench figure against-fixed results/figures/raco-dp-paper-default/run \
		results/tune/privacy-cost/parkinsons results/tune/literature-adult-dp --out results/figures/raco-dp-paper-default

# Is every committed result what today's code produces? `fairbench verify` on every committed
# run directory (each holding a trials.csv) under results/figures and results/tune: a stratified
# sample of VERIFY_SAMPLE trials each, re-run and compared bit for bit (prediction fingerprints,
# epsilon spent); exits non-zero naming each directory that differs. About 10 minutes on 2
# cores at the default sample.
VERIFY_SAMPLE ?= 2
.PHONY: verify-figures
verify-figures: install
	@failed=""; for dir in $$(find results/figures results/tune -name trials.csv -printf '%h\n' | sort); do \
		$(SINGLE_THREADED) $(BIN)/fairbench verify $$dir --sample $(VERIFY_SAMPLE) $(if $(WORKERS),--workers $(WORKERS)) || failed="$$failed $$dir"; \
	done; \
	if [ -n "$$failed" ]; then echo "not reproduced:$$failed"; exit 1; fi

# Paper-figure analogues: each writes a run directory (pareto.csv/.md, figures/) under
# results/figures/<target>/; re-running resumes and skips finished trials.
FIGURES := fig-privacy-cost fig-literature fig-disparate-impact fig-adult-dp fig-adult-eo fig-adult-fnr fig-credit-parkinsons fig-multigroup fig-dp-fermi fig-dpse table-datasets table-step-time
# fig-acs joins when its PUMS file is present (it is not downloaded by `make figures`)
ACS_PUMS := $(if $(FAIRBENCH_DATA),$(wildcard $(FAIRBENCH_DATA)/acs/2018/5-Year/psam_p01.csv))
FIGURES += $(if $(ACS_PUMS),fig-acs)
figures: $(FIGURES)

fig-adult-dp: install
	$(BIN)/fairbench run fig-adult-dp --out results/figures/fig-adult-dp $(EXECUTOR_FLAGS)

fig-adult-eo: install
	$(BIN)/fairbench run adult-eo --out results/figures/fig-adult-eo $(EXECUTOR_FLAGS)

fig-adult-fnr: install
	$(BIN)/fairbench run adult-fnr --out results/figures/fig-adult-fnr $(EXECUTOR_FLAGS)

# RaCO-DP Table 2 analogue: per-step medians and ratios, measured in one process (run it on an
# idle machine: the figure targets above load every core)
table-step-time: install
	$(BIN)/fairbench bench --fits --out results/figures/table-step-time
	cp results/figures/table-step-time/step_time.csv fairbench/runner/step_time.csv

fig-credit-parkinsons: install
	$(BIN)/fairbench run fig-credit-parkinsons --out results/figures/fig-credit-parkinsons $(EXECUTOR_FLAGS)

fig-dp-fermi: install
	$(BIN)/fairbench run fig-dp-fermi --out results/figures/fig-dp-fermi $(EXECUTOR_FLAGS)

# DPSE Table 1 (5 groups), the rho sweep (2 groups), Parkinsons total_UPDRS by sex, and Adult
fig-dpse: install
	$(BIN)/fairbench run fig-dpse --out results/figures/fig-dpse/table1 $(EXECUTOR_FLAGS)
	$(BIN)/fairbench run fig-dpse-sweep --out results/figures/fig-dpse/sweep $(EXECUTOR_FLAGS)
	$(BIN)/fairbench run dpse-parkinsons --out results/figures/fig-dpse/parkinsons $(EXECUTOR_FLAGS)
	$(BIN)/fairbench run dpse-adult --out results/figures/fig-dpse/adult $(EXECUTOR_FLAGS)
	cp results/figures/fig-dpse/table1/group_losses.csv results/figures/fig-dpse/table1.csv
	cp results/figures/fig-dpse/table1/group_losses.md results/figures/fig-dpse/table1.md
	cp results/figures/fig-dpse/sweep/figures/synthetic_group_loss_vs_epsilon.png results/figures/fig-dpse/sweep.png

fig-multigroup: install
	$(BIN)/fairbench run fig-multigroup --out results/figures/fig-multigroup $(EXECUTOR_FLAGS)

# not in `figures`: needs the ACS PUMS file (no checksum, census download); stops with one line
fig-acs: install
	$(BIN)/fairbench run fig-acs --out results/figures/fig-acs $(EXECUTOR_FLAGS)

table-datasets: install
	$(BIN)/fairbench run datasets --out results/figures/datasets $(EXECUTOR_FLAGS)

# Parity with the authors' code (issue 37, docs/parity.md): their code and fairbench's port on
# the same splits, into results/parity/<method>.{csv,md}. AUTHORS=PATH: a checkout of their
# repository at the pinned commit (without it: how to get it, then a non-zero exit);
# AUTHORS_PYTHON: their environment's interpreter (default .venv-<method>/bin/python, made by
# `make parity-env-<method>`); PARITY_SEEDS: folds / seeds per setting (raco-dp 8, dp-fermi 3).
AUTHORS ?=
AUTHORS_PYTHON ?=
PARITY_SEEDS ?=
PARITY_ARGS = $(if $(AUTHORS),--authors "$(AUTHORS)") $(if $(AUTHORS_PYTHON),--python "$(AUTHORS_PYTHON)") \
	$(if $(PARITY_SEEDS),--seeds $(PARITY_SEEDS))
.PHONY: parity-raco-dp parity-dp-fermi parity-env-raco-dp parity-env-dp-fermi
parity-raco-dp parity-dp-fermi: parity-%: install
	@$(BIN)/python -m parity $* $(PARITY_ARGS)

parity-env-raco-dp parity-env-dp-fermi: parity-env-%:
	test -x .venv-$*/bin/python || $(PYTHON) -m venv .venv-$*
	.venv-$*/bin/python -m pip install --quiet -r parity/requirements-$*.txt

clean:
	rm -rf runs .pytest_cache .ruff_cache .mypy_cache
