module backscope.test/gocrash

go 1.19
