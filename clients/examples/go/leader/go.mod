module github.com/mutexd/mutexd/clients/examples/go/leader

go 1.19

require github.com/mutexd/mutexd/clients/go v0.0.0

// The client of this checkout: no download.
replace github.com/mutexd/mutexd/clients/go => ../../../go
