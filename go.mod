module github.com/switchyard/switchyard

go 1.26

require github.com/BurntSushi/toml v1.6.0
