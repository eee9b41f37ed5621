# The two set-up commands of the README.
.PHONY: demo test

demo:
	bash deploy/demo.sh

test:
	bash deploy/test.sh
