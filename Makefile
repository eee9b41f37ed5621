# The two set-up commands of the README. `make demo PORT=8001` (or ADDR=0.0.0.0) picks where the demo listens.
.PHONY: demo test

ADDR ?= 127.0.0.1
PORT ?= 8000

demo:
	bash deploy/demo.sh $(ADDR):$(PORT)

test:
	bash deploy/test.sh
