module triggers-lab/crosscheck

go 1.19
