# The inputs that are not regular files: a FIFO where a scenario should be, a 300 MiB file.
mkfifo checks/a.scenario.yaml
truncate -s 300M huge.json
# A FIFO where a report should be written.
mkfifo out.fifo
