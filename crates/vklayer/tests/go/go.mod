module govkcrash

go 1.19
