package main

import (
	"fmt"
	"os"

	"sparkconv/tokenizer"
)

func main() {
	data, _ := os.ReadFile(os.Args[1])
	tok, err := tokenizer.Parse(data)
	fmt.Println(len(data), tok != nil, err)
}
