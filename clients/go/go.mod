module github.com/mutexd/mutexd/clients/go

go 1.19
